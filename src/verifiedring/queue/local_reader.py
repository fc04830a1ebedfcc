"""A local reader end: a reader on the writer's host, every message from the ring.

It holds the ring, its cursor on it, the tensor arena's reader half (a queue with
one) and its per-message path (:class:`~.local_path.LocalPath`: the take of each
message's chunk, dispatched on its kind, and the waits for it).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sized
from typing import Any

import zmq

from ..arena import ArenaReader
from ..errors import MisuseError
from ..ring import RingHandle, ShmRingBuffer
from ..steps import QueueObserver, reader_actor
from .handle import Handle, check_ipc, check_segment, check_tag
from .local_path import LocalPath
from .message_queue import EndParts, bytes_view
from .reader import QueueReader, subscribe
from .sockets import Signer


class LocalReader(QueueReader):
    """A reader on the writer's host: ``create_from_handle`` with a local rank."""

    is_local_reader = True
    channel = "local"
    _path: LocalPath

    def __init__(self, handle: Handle, rank: int, observer: QueueObserver | None = None) -> None:
        super().__init__(handle, rank, observer)
        bh = handle.buffer_handle
        if bh is None or handle.local_subscribe_addr is None:
            raise MisuseError(f"handle lists local rank {rank} but carries no ring")
        self.max_chunk_bytes = bh.max_chunk_bytes
        self.max_chunks = bh.max_chunks
        _check_ring(self, handle, bh)
        self._ring = ShmRingBuffer.attach(bh)
        sock: zmq.Socket[Any] | None = None
        try:
            self._waits.lost = functools.partial(_ring_lost, self._ring)
            self._cursor = cursor = self._ring.reader(self.local_reader_ranks.index(rank))
            arena = handle.tensor_arena_handle
            if arena is not None:  # before the subscription: then the writer may unlink it
                self._arena = ArenaReader(arena, self.local_reader_ranks.index(rank))
            sock = subscribe(self, handle.local_subscribe_addr, bh.max_chunks + 1, None)
            self._path = LocalPath(
                cursor, sock, self._ctx, self._life, self._outcomes, self._waits, observer,
                reader_actor(rank), self._outcomes.who, self._arena,
            )
        except BaseException:
            if sock is not None:
                sock.close(linger=0)
            if self._arena is not None:
                self._arena.close()
            self._ring.close()
            raise
        self._closed = False

    @property
    def parts(self) -> EndParts:
        return EndParts(self._ring, self._cursor, self._path.socket, None, self._arena,
                        self._path)

    def spin_until_readable(self, pending: Sized, deadline: float) -> None:
        """vLLM 0.34's short wait (:meth:`.LocalPath.spin_until_readable`)."""
        self._path.spin_until_readable(pending, deadline)

    def shutdown(self) -> None:
        # A dequeue blocked in another thread re-checks now and raises CancelledError
        # (ReaderWake.tla: CutterSetStop stores shutting_down, then the cut).
        self._cursor.cut_sleep(super().shutdown)

    @contextlib.contextmanager
    def acquire_read(
        self, timeout: float | None = None, indefinite: bool = False
    ) -> Iterator[memoryview]:
        """vLLM's buffer API: the next message's ring chunk in place, read-only (the
        bytes after verifiedring's header: an ``acquire_write`` body's, or the encoded
        object), with ``dequeue``'s waits, sequence check and errors. Leaving releases
        the chunk (the writer may reuse it), also when the body raises. A message that
        is not in one chunk (an overflow frame, a run) is consumed: a ``bytes`` object is
        yielded read-only, any other raises :class:`MisuseError` naming its type."""
        # plain stores around the calls (an interrupt lands at a call's entry or return)
        path = self._path
        taken, load = path.taken, path.load_inline
        path.load_inline = taken.lend
        try:
            got = self.dequeue(timeout, indefinite=indefinite)
        finally:
            path.load_inline = load
        if not taken.lent:  # not in one chunk: as a remote reader's, bytes or refused
            with bytes_view(self._who(), got) as view:
                yield view
            return
        try:
            yield got
        finally:
            taken.lent = False
            try:
                self._cursor.release()
            finally:
                with contextlib.suppress(BufferError):  # the caller kept a view of it
                    got.release()

    def _release(self) -> None:
        self._path.close()
        self._ring.close()
        if self._arena is not None:
            self._arena.close()


def _ring_lost(ring: ShmRingBuffer) -> str | None:
    """How a local reader sees its writer gone: nobody holds the ring's lock any more,
    whatever PID namespace the writer runs in."""
    return None if ring.creator_holds() else "its process has exited or let go of the ring"


def _check_ring(reader: LocalReader, handle: Handle, bh: RingHandle) -> None:
    """The handle's ring is ``reader``'s writer's (tag), its ipc socket is there and
    the segment has its size."""
    check_tag(handle, Signer(handle.hmac_key), reader._who())
    if handle.local_subscribe_addr is not None:  # checked by the caller
        check_ipc(handle.local_subscribe_addr, reader._outcomes.writer, reader._who())
    check_segment(bh)
