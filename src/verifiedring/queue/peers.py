"""The writer's knowledge of its readers: who joined (the handshake), who left since.

Each reader announces itself with a hello topic (rank, pid, host; tagged with
the queue's key) on its channel's XPUB. The handshake waits until every local
rank and ``n_remote`` remote readers have joined. Afterwards a reader whose
connection closes -- it exited or died, or (TCP) its heartbeats stopped --
shows as the unsubscription of its hello: :meth:`Peers.watch` raises
:class:`BrokenPeerError` naming it, so a writer waiting for it is told at once.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import zmq

from ..errors import BrokenPeerError
from .sockets import Hello, Signer, hello_events
from .wire import MAX_RANK

logger = logging.getLogger("verifiedring")


class Peers:
    """The readers one writer has seen, by channel."""

    def __init__(
        self, who: str, signer: Signer, local_ranks: tuple[int, ...], n_remote: int,
        socks: tuple[zmq.Socket[Any] | None, zmq.Socket[Any] | None],
    ) -> None:
        """``socks``: the local and the remote XPUB (``None`` where there is none)."""
        local_sock, remote_sock = socks
        self._who = who
        self._signer = signer
        self._want_local = set(local_ranks)
        self._n_remote = n_remote
        self._n_reader = len(local_ranks) + n_remote  # ranks 0..n_reader, or rankless
        self._socks = [(s, is_local) for s, is_local in ((local_sock, True), (remote_sock, False))
                       if s is not None]
        self.local: dict[int, Hello] = {}
        self.remote: dict[int, Hello] = {}
        self._left: set[int] = set()  # remote ranks seen leaving (remote_left)
        self._poller = zmq.Poller()
        for sock, _ in self._socks:
            self._poller.register(sock, zmq.POLLIN)

    def sockets(self) -> list[zmq.Socket[Any]]:
        """The XPUBs the readers subscribe to (local, remote; where there is one)."""
        return [sock for sock, _ in self._socks]

    def complete(self) -> bool:
        """Every local rank and ``n_remote`` remote readers have joined."""
        return set(self.local) == self._want_local and len(self.remote) >= self._n_remote

    def describe(self) -> str:
        return (
            f"{self._who} waits for readers to subscribe: local ranks "
            f"{sorted(self._want_local - set(self.local))} missing; "
            f"{self._n_remote - len(self.remote)} of {self._n_remote} remote readers missing "
            f"(seen {sorted(self.remote)})"
        )

    def gather(self, ms: int) -> bool:
        """Take the hellos that arrive within ``ms``; true once :meth:`complete`."""
        events = dict(self._poller.poll(ms))
        for sock, is_local in self._socks:
            if sock in events:
                for joined, hello in hello_events(sock, self._signer):
                    self._note(joined, hello, is_local)
        return self.complete()

    def _note(self, joined: bool, hello: Hello, is_local: bool) -> None:
        table = self.local if is_local else self.remote
        if not joined:
            if table.get(hello.rank) == hello:
                del table[hello.rank]  # left before the handshake completed
            return
        if not is_local and self._n_reader < hello.rank < MAX_RANK:
            logger.warning(
                "%s: %s announced a rank beyond n_reader=%d: ignored", self._who, hello,
                self._n_reader,
            )
            return
        if is_local != (hello.rank in self._want_local):
            logger.warning(
                "%s: %s announced itself on the %s socket: ignored (local ranks %s)",
                self._who, hello, "local" if is_local else "remote", sorted(self._want_local),
            )
            return
        other = self.local.get(hello.rank) or self.remote.get(hello.rank)
        if other is not None and other != hello:
            raise BrokenPeerError(
                f"{self._who}: rank {hello.rank} claimed twice, by {other} and by {hello}: "
                "each reader rank belongs to one process"
            )
        table[hello.rank] = hello

    def watch(self) -> None:
        """Raise :class:`BrokenPeerError` naming a reader that has left since it joined."""
        for sock, is_local in self._socks:
            table = self.local if is_local else self.remote
            for joined, hello in hello_events(sock, self._signer):
                if not joined and table.get(hello.rank) == hello:
                    raise BrokenPeerError(
                        f"{self._who}: {hello} is gone: its connection to the "
                        f"{'local' if is_local else 'remote'} socket closed (it exited or "
                        "died, or its heartbeats stopped)"
                    )

    def remote_left(self) -> set[int]:
        """Ranks of the remote readers that have left since they joined (so far)."""
        for sock, is_local in self._socks:
            for joined, hello in hello_events(sock, self._signer):
                if not joined and not is_local and self.remote.get(hello.rank) == hello:
                    self._left.add(hello.rank)
        return self._left

    def name(self, rank: int) -> str:
        """The reader of ``rank``, as errors name it."""
        hello = self.local.get(rank) or self.remote.get(rank)
        return str(hello) if hello is not None else f"reader rank {rank}"

    def stall_name(self, rank: int) -> StallName:
        """The reader of ``rank`` as a stall line names it: :meth:`name`, then whether its
        process is alive, looked up each time the line is written."""
        return StallName(self.name(rank), self.local.get(rank) or self.remote.get(rank))


class StallName:
    """A reader in a stall line: its name and, at each ``str()``, whether it lives."""

    __slots__ = ("_hello", "_name")

    def __init__(self, name: str, hello: Hello | None) -> None:
        self._name = name
        self._hello = hello

    def __str__(self) -> str:
        return f"{self._name}, {liveness(self._hello)}"


def liveness(hello: Hello | None) -> str:
    """Whether the process a hello names is alive, as far as this process can tell: its
    pid on this host (a process in another PID namespace may not be seen), else only its
    connection, which the writer watches (a closed one is a BrokenPeerError)."""
    if hello is None or hello.host != socket.gethostname():
        return "connected (its process is on another host)"
    try:
        os.kill(hello.pid, 0)
    except ProcessLookupError:
        return "connected, but no process has its pid here (another PID namespace?)"
    except PermissionError:
        pass  # it exists, owned by another user
    return "its process is alive"
