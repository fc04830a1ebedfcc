"""A local reader end: every message from the ring, dispatched on its chunk's kind.

A dequeue takes the ring chunk of message ``seq`` (:func:`.wire.decode_chunk`:
its kind and sequence number checked) and dispatches: INLINE, the object is in
it; OVERFLOW, its frame follows on the ipc socket (:mod:`.flavors.overflow`);
RUN_FIRST, the object is a run of chunks (:mod:`.flavors.run`). A dequeue that
a timeout or an interrupt left unfinished leaves the reader in the spec's
state for it (FRAME, RUN): the next one goes on from there.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from time import monotonic
from typing import Any, ClassVar

import zmq

from ..arena import ArenaReader
from ..errors import MisuseError, RingTimeoutError
from ..ring import RingHandle, ShmRingBuffer
from ..steps import READER_TAKE_CHUNK, QueueObserver
from ..waiting import Deadline, StallLog, wait_for
from . import wire
from .ages import took
from .flavors import NEXT, LargeReceiver
from .flavors.control import FRAME_WAIT_MS, LocalControl
from .flavors.overflow import FrameReceiver
from .flavors.run.receiver import RunReceiver
from .handle import Handle, check_ipc, check_segment, check_tag
from .held_chunk import TakenChunk
from .lifecycle import CUT_DECODE, ReaderState
from .reader import QueueReader, subscribe
from .readiness import local_spin_until_readable
from .writer_watch import watch_writer

_decode_chunk = wire.decode_chunk  # bound once: the hot path pays no lookups
_load_inline = wire.load_inline
#: The observer's name of what ReaderTakeChunk took.
_KIND_NAMES = {
    wire.INLINE: "inline", wire.INLINE_LENT: "inline", wire.OVERFLOW: "overflow",
    wire.RUN_FIRST: "first", wire.RAW: "inline",
}
_INLINE_KINDS = (wire.INLINE, wire.INLINE_LENT, wire.RAW)  # RAW: acquire_write's bytes
_IDLE = ReaderState.IDLE
_OWED = ReaderState.OWED


class LocalReader(QueueReader):
    """A reader on the writer's host: ``create_from_handle`` with a local rank. It holds
    its ring cursor, its control channel (:class:`LocalControl`), the socket flavor's
    frame receiver, the stream flavor's run receiver and its taken chunk."""

    is_local_reader = True
    channel = "local"
    spin_until_readable = local_spin_until_readable  # vLLM 0.34's short wait
    _resumable: ClassVar[frozenset[ReaderState]] = frozenset(
        (ReaderState.FRAME, ReaderState.RUN, ReaderState.OWED)
    )

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
            life, outcomes = self._life, self._outcomes
            self._control = control = LocalControl(sock, life, outcomes, observer, self._actor)
            self._frames = FrameReceiver(control, life, outcomes, observer, self._actor)
            self._writer_watch = watch_writer(
                self._ctx, sock, cursor, control.look_now, self._who()
            )
            self._runs = RunReceiver(cursor, life, outcomes, control, observer, self._actor)
            self._run = self._runs.run
            self._taken = TakenChunk(cursor, life, self._run)
            #: Called after each message taken from the ring (a pluggable sleeper's clock).
            self.on_read: Callable[[], None] | None = None
            #: What a one-chunk message becomes: its object; acquire_read's: its chunk.
            self._load_inline: Callable[[memoryview, tuple[int, int, int, int]], Any] = (
                _load_inline
            )
        except BaseException:
            watch = getattr(self, "_writer_watch", None)
            if watch is not None:
                watch.close()
            if sock is not None:
                sock.close(linger=0)
            if self._arena is not None:
                self._arena.close()
            self._ring.close()
            raise
        self._closed = False

    def _socket(self) -> zmq.Socket[Any]:
        return self._control.sock

    def _dequeue(self, deadline: Deadline, poll: bool) -> Any:
        """Take the ring chunk of the next message and dispatch on its kind."""
        cursor = self._cursor
        held = cursor.holding and self._taken.held_unread()
        if not held and not cursor.poll():
            self._wait_ring(deadline, poll)
        waits = self._waits
        waits.took_at = monotonic()  # its chunk is there: before the step
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        seq = kind = -1
        got: Any = None  # what the step delivered, for the observer
        run = self._run
        life = self._life
        expect = life.seq
        try:
            # spec: ReaderTakeChunk -- released once its message is consumed, also on a
            # raise; a run's FIRST chunk is held on by the run (ReaderReleaseRunChunk)
            chunk = cursor.held() if held else cursor.take()
            try:
                header = _decode_chunk(chunk, expect)
                if header is None:
                    raise self._outcomes.out_of_order("ring", *wire.read_header(chunk)[:2])
                kind, seq = header[0], header[1]
                if kind in _INLINE_KINDS:
                    life.seen is None or life.saw(_OWED)  # checked if watched
                    # consumed before it is decoded; owed from here on as its DecodeError
                    # unless the decode ends (stores only: no call)
                    life.seq = seq + 1
                    life.owed = CUT_DECODE
                    life.state = _OWED
                    try:
                        got = self._load_inline(chunk, header)
                    except BaseException as exc:
                        got = self._outcomes.failed(seq, exc)
                        raise
                    # owed if cut from here on (stores only: no call); a lent chunk's view
                    # too: the next acquire_read yields it, then releases the chunk
                    # spec: ReaderInterrupted -- a cut from here on: the object is owed
                    delivery = life.delivery
                    delivery.obj = got
                    life.owed = delivery
                    life.state = _OWED
                    return got
                # a run's FIRST (the run holds the chunk on), or an overflow marker (the
                # chunk is released now, the frame awaited)
                large: LargeReceiver = self._runs if kind == wire.RUN_FIRST else self._frames
                large.begin(chunk, header)
            finally:
                # kept taken if cut before its message was consumed: read again next
                taken = self._taken
                if not run.active and not taken.lent and (life.seq != expect or
                                                          life.state is not _IDLE):
                    taken.release_taken()
                on_read = self.on_read
                if on_read is not None:
                    on_read()
        finally:
            if obs is not None:
                obs.end(self._actor, READER_TAKE_CHUNK, seq, got, _KIND_NAMES.get(kind, ""))
        return large.take(deadline, waits.recv, waits.watch, waits.stall_interval)

    def shutdown(self) -> None:
        # A dequeue blocked in another thread re-checks now and raises CancelledError
        # (ReaderWake.tla: CutterSetStop stores shutting_down, then the cut).
        self._cursor.cut_sleep(super().shutdown)

    def _unfinished(self, deadline: Deadline, poll: bool) -> Any:
        """A dequeue after one left unfinished: the pending frame, or the run's rest."""
        large: LargeReceiver = (
            self._frames if self._life.state is ReaderState.FRAME else self._runs
        )
        waits = self._waits
        got = large.unfinished(deadline, waits.recv, waits.watch, waits.stall_interval)
        return self._dequeue(deadline, poll) if got is NEXT else got

    def _wait_ring(self, deadline: Deadline, poll: bool) -> None:
        if self._writer_watch is not None and not self._writer_watch.holds():
            self._writer_watch = None
        if poll:
            self._control.look_now()  # a poll drains the socket (SHUTDOWN) each call
        if not self._ring_or_shutdown():
            wait_for(
                self._ring_or_shutdown, deadline, self._ring_stall, self._ring_timeout,
                sleeper=self._cursor.sleeper, recheck=self._recheck_ring,
            )

    def _ring_or_shutdown(self) -> bool:
        """The ring's next chunk is ready; every ``SLICE`` also drain the socket
        (stash frames, note SHUTDOWN: raises :class:`ClosedError` once all is read).
        Not ready after ``shutdown()``: raises :class:`CancelledError` (vLLM checks the
        ring first, so a published message is still returned)."""
        cursor = self._cursor
        if cursor.poll():
            return True
        waits = self._waits
        if waits.shutting_down:
            waits.cancelled()
        control = self._control
        looked = control.look()
        if self._outcomes.broke is not None:
            if cursor.poll():  # published before BROKEN was sent
                return True
            control.tell()
        if looked:
            total = self._life.shutdown_total
            if total is not None:
                self._saw_shutdown(total)
            waits.watch()  # after SHUTDOWN: a writer that shut down and exited is not broken
        return False

    def _recheck_ring(self) -> bool:
        """The re-check before a block: :meth:`_ring_or_shutdown`; and once the writer
        has ended (its SHUTDOWN or BROKEN sent, maybe still in flight: the ring's ended
        word), a wait of at most ``FRAME_WAIT_MS`` on the socket and a look at it however
        recent the last one, with no block on the ring after it (ReaderWake.tla: the
        frame is seen however long its delivery takes, and no block outlasts it)."""
        if self._cursor.poll():
            return True
        if self._cursor.see_ended():
            control = self._control
            control.sock.poll(FRAME_WAIT_MS)
            control.look_now()
        return self._ring_or_shutdown()

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
        taken = self._taken
        self._load_inline = taken.lend
        try:
            got = self.dequeue(timeout, indefinite=indefinite)
        finally:
            self._load_inline = _load_inline
        if not taken.lent:  # not in one chunk: as a remote reader's, bytes or refused
            with self._bytes_view(got) as view:
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

    def _look(self) -> bool:
        return self._taken.look()

    def _pay_owed(self) -> Any:
        self._taken.settle()
        return self._outcomes.pay_owed()

    def _ring_stall(self) -> StallLog:
        return StallLog(self._describe_ring_wait, self._waits.stall_interval())

    def _describe_ring_wait(self) -> str:
        waits = self._waits
        c, alive = self._cursor, waits.lost() or "its process holds the ring"
        return (f"{self._who()} waits for message seq {self._life.seq} in chunk {c.index} "
                f"({c.flag_state()}) from {self._outcomes.writer}, {alive}{took(waits.took_at)}")

    def _ring_timeout(self, waited: float) -> RingTimeoutError:
        c = self._cursor
        return RingTimeoutError(f"{self._who()} timed out after {waited:.3f} s waiting for "
                                f"message seq {self._life.seq} in ring chunk {c.index} "
                                f"({c.flag_state()})")

    def _release(self) -> None:
        self._run.close()
        if self._writer_watch is not None:
            self._writer_watch.close()  # first: its thread may cut the ring's sleep word
        self._control.close()
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
    check_tag(handle, reader._signer, reader._who())
    if handle.local_subscribe_addr is not None:  # checked by the caller
        check_ipc(handle.local_subscribe_addr, reader._outcomes.writer, reader._who())
    check_segment(bh)
