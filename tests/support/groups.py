"""A writer and its readers in this process, handshaken: the queue tests' group."""

from __future__ import annotations

from typing import Any

from support.ranks import remote_ranks
from verifiedring.queue import LocalReader, QueueWriter, RemoteReader

T = 10.0  # generous bound for any single wait in these tests
LOOPBACK = "127.0.0.1"


class Group:
    """A writer and its readers, all in this process, ready to use."""

    def __init__(
        self, n_local: int, n_remote: int, local_ranks: list[int] | None = None, **kw: Any
    ) -> None:
        local_ranks = local_ranks if local_ranks is not None else list(range(1, n_local + 1))
        kw.setdefault("max_chunk_bytes", 4096)
        kw.setdefault("max_chunks", 4)
        self.writer = QueueWriter(
            n_local + n_remote, n_local, local_ranks,
            connect_ip=LOOPBACK if n_remote else None, **kw,
        )
        self.handle = self.writer.export_handle()
        #: The local readers, then the remote ones (each typed: its role's constructor).
        self.local = [LocalReader(self.handle, r) for r in local_ranks]
        self.remote = [RemoteReader(self.handle, r) for r in remote_ranks(local_ranks, n_remote)]
        self.readers: list[LocalReader | RemoteReader] = [*self.local, *self.remote]
        self.writer.wait_until_ready(T)
        for r in self.readers:
            r.wait_until_ready(T)

    def close(self) -> None:
        """Readers first: a writer closing before its remote readers waits (at most its
        linger) for them to acknowledge everything."""
        for q in [*self.readers, self.writer]:
            q.close()
