"""A local reader end: every message from the ring, dispatched on its chunk's kind.

A dequeue takes the ring chunk of message ``seq`` (:func:`.wire.decode_chunk`:
its kind and sequence number checked) and dispatches: INLINE, the object is in
it; OVERFLOW, its frame follows on the ipc socket (:mod:`.flavors.overflow`);
RUN_FIRST, the object is a run of chunks (:mod:`.flavors.run`). A dequeue that
a timeout or an interrupt left unfinished leaves the reader in the spec's
state for it (FRAME, RUN): the next one goes on from there.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from time import monotonic
from typing import Any, ClassVar

import zmq

from ..arena import ArenaReader
from ..errors import BrokenPeerError, ClosedError, DecodeError, MisuseError, RingTimeoutError
from ..ring import RingHandle, ShmRingBuffer
from ..shm import SHM_DIR
from ..steps import READER_TAKE_CHUNK, QueueObserver
from ..waiting import Deadline, StallLog, wait_for
from . import wire
from .ages import took
from .flavors.overflow import OverflowReader
from .flavors.run.reader import NOT_DECODED, RunReceiver
from .handle import Handle, check_ipc, check_tag
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
_RUN = ReaderState.RUN
_CUT_AS_BEGUN = "cut as its run began"


class LocalReader(TakenChunk, OverflowReader, QueueReader):
    """A reader on the writer's host: ``create_from_handle`` with a local rank."""

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
        self._init_overflow()
        _check_ring(self, handle, bh)
        self._ring = ShmRingBuffer.attach(bh)
        sock: zmq.Socket[Any] | None = None
        try:
            self._cursor = cursor = self._ring.reader(self.local_reader_ranks.index(rank))
            arena = handle.tensor_arena_handle
            if arena is not None:  # before the subscription: then the writer may unlink it
                self._arena = ArenaReader(arena, self.local_reader_ranks.index(rank))
            self._sock = sock = subscribe(
                self, handle.local_subscribe_addr, bh.max_chunks + 1, None
            )
            self._writer_watch = watch_writer(self._ctx, sock, cursor, self._look_now, self._who())
            self._runs = RunReceiver(self._cursor, weakref.proxy(self), observer, self._actor)
            self._run = self._runs.run
            #: Called after each message taken from the ring (a pluggable sleeper's clock).
            self.on_read: Callable[[], None] | None = None
            #: What a one-chunk message becomes: its object; acquire_read's: its chunk.
            self._load_inline: Callable[[memoryview, tuple[int, int, int, int]], Any] = (
                _load_inline
            )
            self._lent = False  # the chunk of the message just dequeued is still taken
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
        return self._sock

    def _dequeue(self, deadline: Deadline, poll: bool) -> Any:
        """Take the ring chunk of the next message and dispatch on its kind."""
        cursor = self._cursor
        held = cursor.holding and self._held_unread()
        if not held and not cursor.poll():
            self._wait_ring(deadline, poll)
        self._took_at = monotonic()  # its chunk is there: before the step
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
                self._begin_large(chunk, header)
            finally:
                # kept taken if cut before its message was consumed: read again next
                if not run.active and not self._lent and (life.seq != expect or
                                                          life.state is not _IDLE):
                    self._release_taken()
                on_read = self.on_read
                if on_read is not None:
                    on_read()
        finally:
            if obs is not None:
                obs.end(self._actor, READER_TAKE_CHUNK, seq, got, _KIND_NAMES.get(kind, ""))
        if run.active:
            return self._load_run()
        return self._take_frame(seq, deadline)  # the marker's

    def _begin_large(self, chunk: memoryview, header: tuple[int, int, int, int]) -> None:
        """The chunk starts a run (the run holds it on), or is an overflow marker (its
        frame is awaited)."""
        kind, seq = header[0], header[1]
        if kind == wire.RUN_FIRST:
            # the run counts as cut until its load ends (stores only: no call before the
            # sequence number moves): the next dequeue skips its rest and reports it
            life = self._life
            life.seen is None or life.saw(_RUN)  # checked if watched
            self._runs.interrupted = (seq, _CUT_AS_BEGUN)
            life.state = _RUN
            life.seq = seq + 1  # consumed before it is decoded
            self._run.begin(seq, chunk, header[2])
        else:
            self._pending = seq  # the chunk is released now; the frame is awaited
            self._life.enter(ReaderState.FRAME)

    def shutdown(self) -> None:
        # A dequeue blocked in another thread re-checks now and raises CancelledError
        # (ReaderWake.tla: CutterSetStop stores shutting_down, then the cut).
        self._cursor.cut_sleep(super().shutdown)

    def _unfinished(self, deadline: Deadline, poll: bool) -> Any:
        """A dequeue after one left unfinished: the pending frame, or the run's rest."""
        if self._life.state is ReaderState.FRAME:
            return self._resume(deadline)
        self._finish_interrupted_run()
        return self._dequeue(deadline, poll)

    def _wait_ring(self, deadline: Deadline, poll: bool) -> None:
        if self._writer_watch is not None and not self._writer_watch.holds():
            self._writer_watch = None
        if poll:
            self._socket_check_at = 0.0  # a poll drains the socket (SHUTDOWN) each call
        if not self._ring_or_shutdown():
            wait_for(
                self._ring_or_shutdown, deadline, self._ring_stall, self._ring_timeout,
                sleeper=self._cursor.sleeper, recheck=self._recheck_ring,
            )

    # --- runs -------------------------------------------------------------------------

    def _load_run(self) -> Any:
        runs = self._runs
        runs.decoded = NOT_DECODED
        try:
            return runs.load()
        finally:
            # the run is over (else the next dequeue skips its rest): its object, if
            # decoded, is owed until dequeue returns it (stores only: no call)
            life = self._life
            if runs.interrupted is None and life.state is _RUN:
                got = runs.decoded
                move = _IDLE if got is NOT_DECODED else _OWED
                life.seen is None or life.saw(move)  # checked if watched
                runs.decoded = NOT_DECODED
                if got is NOT_DECODED:
                    life.state = _IDLE
                else:
                    delivery = life.delivery
                    delivery.obj = got
                    life.owed = delivery
                    life.state = _OWED

    def _finish_interrupted_run(self) -> None:
        """Skip the rest of the run a dequeue left mid-way and raise DecodeError for
        it; left mid-way again (an interrupt, a cancel), the state stays RUN. The error
        is owed (stores only, as the run's record clears) before it is raised: a cut
        after the skip leaves it to the next dequeue."""
        interrupted = self._runs.interrupted
        life = self._life
        if interrupted is None:
            life.enter(_IDLE)
            return
        life.seen is None or life.saw(_OWED)  # checked if watched
        err = self._runs.finish_interrupted(*interrupted)
        life.owed = err
        life.state = _OWED
        self._pay_owed()

    # --- what the run asks (RunOwner) ---------------------------------------------

    def who(self) -> str:
        return self._who()

    def stall_interval(self) -> float:
        return self._log_interval()

    def named(self, exc: DecodeError) -> DecodeError:
        return self._outcomes.named(exc)

    def broken(self, why: str) -> None:
        self._outcomes.broken(why)

    def watch_run(self) -> None:
        """While a run waits for its next chunk: woken, the writer gone or broken
        (BROKEN, nothing more in the ring), or SHUTDOWN before the run's end (the
        writer could not abort it) raise."""
        self._watch()
        self._look_at_socket()
        if self._outcomes.broke is not None and not self._cursor.poll():
            self._tell()
        total = self._shutdown_total
        run = self._run
        if total is not None and total <= run.seq:
            why = (
                f"the writer shut the queue down after {total} messages, in the middle of "
                f"message seq {run.seq}'s run (part {run.part} read)"
            )
            self._stop(ReaderState.CLOSED, why)
            raise ClosedError(f"{self._who()}: {why}")

    # --- waiting ------------------------------------------------------------------

    def _writer_lost(self) -> str | None:
        """Gone once nobody holds the ring's lock: its process exited (or closed the
        ring), whatever PID namespace it runs in (its pid may mean nothing here)."""
        if not self._ring.creator_holds():
            return "its process has exited or let go of the ring"
        return None

    def _ring_stall(self) -> StallLog:
        return StallLog(self._describe_ring_wait, self._log_interval())

    def _describe_ring_wait(self) -> str:
        c, alive = self._cursor, self._writer_lost() or "its process holds the ring"
        return (f"{self._who()} waits for message seq {self._life.seq} in chunk {c.index} "
                f"({c.flag_state()}) from {self._outcomes.writer}, {alive}{took(self._took_at)}")

    def _ring_timeout(self, waited: float) -> RingTimeoutError:
        c = self._cursor
        return RingTimeoutError(
            f"{self._who()} timed out after {waited:.3f} s waiting for message seq "
            f"{self._life.seq} in ring chunk {c.index} ({c.flag_state()})"
        )

    def _release(self) -> None:
        self._run.close()
        self._stash.clear()
        if self._writer_watch is not None:
            self._writer_watch.close()  # first: its thread may cut the ring's sleep word
        self._sock.close(linger=0)
        self._ring.close()
        if self._arena is not None:
            self._arena.close()


def _check_ring(reader: LocalReader, handle: Handle, bh: RingHandle) -> None:
    """The handle's ring is ``reader``'s writer's (tag), its ipc socket is there and
    the segment has its size."""
    check_tag(handle, reader._signer, reader._who())
    if handle.local_subscribe_addr is not None:  # checked by the caller
        check_ipc(handle.local_subscribe_addr, reader._outcomes.writer, reader._who())
    expected = bh.layout.total_bytes
    try:
        actual: int | None = os.stat(os.path.join(SHM_DIR, bh.name)).st_size
    except FileNotFoundError:
        actual = None  # attach reports a missing segment
    if actual is not None and actual != expected:
        raise BrokenPeerError(
            f"segment {bh.name!r} has {actual} bytes but the handle's geometry "
            f"(n_reader={bh.n_reader}, max_chunk_bytes={bh.max_chunk_bytes}, "
            f"max_chunks={bh.max_chunks}) needs {expected}: handle and segment do not match"
        )
