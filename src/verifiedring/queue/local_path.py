"""A local reader's path: every message from the ring, dispatched on its chunk's kind.

A dequeue takes the ring chunk of message ``seq`` (:func:`.wire.decode_chunk`:
its kind and sequence number checked) and dispatches: INLINE, the object is in
it; OVERFLOW, its frame follows on the ipc socket (:mod:`.flavors.overflow`);
RUN_FIRST, the object is a run of chunks (:mod:`.flavors.run`). A dequeue that
a timeout or an interrupt left unfinished leaves the reader in the spec's
state for it (FRAME, RUN): the next one goes on from there. The path holds the
reader's cursor, its control channel (:class:`LocalControl`), the socket flavor's
frame receiver, the stream flavor's run receiver, its taken chunk and the watch on
its writer.
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from time import monotonic
from typing import Any, ClassVar

import zmq

from ..arena import ArenaReader
from ..cursors import ReaderCursor
from ..errors import RingTimeoutError
from ..steps import READER_TAKE_CHUNK, QueueObserver
from ..waiting import Deadline, StallLog, wait_for
from . import wire
from .ages import took
from .flavors import NEXT, LargeReceiver
from .flavors.control import FRAME_WAIT_MS, LocalControl
from .flavors.overflow import FrameReceiver
from .flavors.run.receiver import RunReceiver
from .held_chunk import TakenChunk
from .lifecycle import CUT_DECODE, ReaderLifecycle, ReaderState
from .outcomes import ReaderOutcomes
from .reader_path import ReaderPath
from .reader_waits import ReaderWaits
from .readiness import spin_until
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


class LocalPath(ReaderPath):
    """A local reader's per-message path, over its ring cursor and ipc socket."""

    _resumable: ClassVar[frozenset[ReaderState]] = frozenset(
        (ReaderState.FRAME, ReaderState.RUN, ReaderState.OWED)
    )

    def __init__(  # noqa: PLR0913 -- the end's parts it shares, each named
        self, cursor: ReaderCursor, sock: zmq.Socket[Any], ctx: zmq.Context[Any],
        life: ReaderLifecycle, outcomes: ReaderOutcomes, waits: ReaderWaits,
        observer: QueueObserver | None, actor: str, who: Callable[[], str],
        arena: ArenaReader | None,
    ) -> None:
        """Over ``cursor`` and ``sock`` (the caller closes both if this raises)."""
        super().__init__(life, outcomes, waits, observer, actor, who, arena)
        self._cursor = cursor
        self._control = control = LocalControl(sock, life, outcomes, observer, actor)
        self._frames = FrameReceiver(control, life, outcomes, observer, actor)
        self._runs = RunReceiver(cursor, life, outcomes, control, observer, actor)
        self._run = self._runs.run
        #: The chunk the cursor holds outside a run (lent to acquire_read, or left by a cut).
        self.taken = TakenChunk(cursor, life, self._run)
        #: Called after each message taken from the ring (a pluggable sleeper's clock).
        self.on_read: Callable[[], None] | None = None
        #: What a one-chunk message becomes: its object; acquire_read's: its chunk, lent.
        self.load_inline: Callable[[memoryview, tuple[int, int, int, int]], Any] = (
            _load_inline
        )
        self._writer_watch = watch_writer(ctx, sock, cursor, control.look_now, who())  # last

    @property
    def socket(self) -> zmq.Socket[Any]:
        return self._control.sock

    @property
    def watched(self) -> bool:
        """Whether a thread watches the writer (the kernel says when it goes)."""
        return self._writer_watch is not None

    def take(self, deadline: Deadline, poll: bool) -> Any:
        """Take the ring chunk of the next message and dispatch on its kind."""
        cursor = self._cursor
        held = cursor.holding and self.taken.held_unread()
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
                        got = self.load_inline(chunk, header)
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
                taken = self.taken
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

    def unfinished(self, deadline: Deadline, poll: bool) -> Any:
        """A dequeue after one left unfinished: the pending frame, or the run's rest."""
        large: LargeReceiver = (
            self._frames if self._life.state is ReaderState.FRAME else self._runs
        )
        waits = self._waits
        got = large.unfinished(deadline, waits.recv, waits.watch, waits.stall_interval)
        return self.take(deadline, poll) if got is NEXT else got

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

    def look(self) -> bool:
        return self.taken.look()

    def spin_until_readable(self, pending: Sized, deadline: float) -> None:
        """The reader's ``spin_until_readable``: return once its next chunk is ready,
        ``pending`` is non-empty, ``time.monotonic()`` reaches ``deadline`` or
        ``shutdown()`` is called (the caller re-checks ``readable()``):
        :func:`~.readiness.spin_until` on its cursor's sleeper."""
        waits = self._waits
        spin_until(lambda: waits.shutting_down or self.look(), pending, deadline,
                   self._cursor.sleeper)

    def pay_owed(self) -> Any:
        self.taken.settle()
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

    def _let_go(self) -> None:
        self._run.close()
        if self._writer_watch is not None:
            self._writer_watch.close()  # first: its thread may cut the ring's sleep word
        self._control.close()
