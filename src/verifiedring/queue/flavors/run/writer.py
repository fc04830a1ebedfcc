"""The run flavor's writer half: a message too large for one chunk, as a run."""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic
from typing import Any

from ....errors import MisuseError
from ....ring import WriterCursor
from ....steps import (
    WRITER_ABORT_RUN,
    WRITER_ACTOR,
    WRITER_INTERRUPTED_AFTER_PUBLISH,
    WRITER_PUBLISH_RUN_CHUNK,
    QueueObserver,
)
from ....waiting import FOREVER, Deadline
from ... import wire
from ...serialization import Serializer
from . import KIND_OF, bytes_view

_HEADER_BYTES = wire.HEADER_BYTES
_NO_CHUNK = memoryview(b"")
_ENDS = (wire.RUN_LAST, wire.RUN_ABORT)  # a run is over once one of them is out


class RunWriter:
    """Writes one message's bytes, as they come, into a run of chunks of ``cursor``."""

    def __init__(self, cursor: WriterCursor, observer: QueueObserver | None) -> None:
        self.cursor = cursor
        self.observer = observer
        # Invariant: _held iff _chunk is the claimed chunk being filled (else _NO_CHUNK).
        self._chunk = _NO_CHUNK
        self._held = False
        self._off = 0  # where its next byte goes
        self._at = -1  # the ring index of the chunk claimed last
        self._kind = wire.RUN_MORE  # the kind of the chunk published (or being) last
        self._watch: Callable[[], None] | None = None
        self.seq = -1
        self.part = 0  # the part number of the chunk being filled
        # Invariant: a run was begun and neither its LAST nor its ABORT is published.
        self.active = False
        #: The seq of the last run that ended (its LAST or ABORT published), -1: none.
        self.ended = -1
        self._obj: object = None  # for the observer

    def begin(
        self, seq: int, deadline: Deadline, watch: Callable[[], None], obj: object
    ) -> None:
        """Claim the run's first chunk, waiting at most ``deadline`` (nothing is
        published before it: a timeout leaves no trace)."""
        self._watch = watch
        self.seq = seq
        self.part = 0
        self._kind = wire.RUN_MORE
        self._claim(deadline)
        self._obj = obj  # after the claim: a timeout keeps no reference to it
        self.active = True

    def _claim(self, deadline: Deadline) -> None:
        cursor = self.cursor
        cursor.claim(deadline, self._watch)
        self._at = cursor.index
        self._chunk = cursor.fill()
        self._held = True
        self._off = _HEADER_BYTES

    @property
    def holding(self) -> bool:
        """A claimed chunk is being filled (an ABORT can go in it without a wait)."""
        return self._held and self.cursor.holding

    def write(self, b: Any) -> int:
        """Append ``b``'s bytes to the run: fill the chunk, publish it when full and
        more follows, claim the next (waiting as long as the readers are alive)."""
        view = bytes_view(b)
        n = len(view)
        pos = 0
        while pos < n:
            if not self._held:
                self._claim(FOREVER)
                continue
            chunk = self._chunk
            room = len(chunk) - self._off
            if not room:
                self._publish(wire.RUN_MORE)
                continue
            k = min(room, n - pos)
            off = self._off
            chunk[off : off + k] = view[pos : pos + k]
            self._off = off + k
            pos += k
        return n

    def write_head(self, buffers: list[memoryview]) -> None:
        """The run's table of out-of-band buffers, then the buffers."""
        self.write(wire.buffer_table(buffers))
        for b in buffers:
            self.write(b)

    def finish(self) -> None:
        """Publish the chunk being filled as the run's LAST (the run is over once its
        store is done, also when an interrupt lands right after it)."""
        try:
            self._publish(wire.RUN_LAST)
        finally:
            if not self._held:
                self._end()

    def _end(self) -> None:
        self.active = False
        self.ended = self.seq
        self._obj = None
        self._watch = None

    def _publish(self, kind: int) -> None:
        obs = self.observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterPublishRunChunk -- FIRST, MORE or LAST of message seq (one ring message)
        if self.part == 0 and kind == wire.RUN_MORE:
            kind = wire.RUN_FIRST
        self._kind = kind
        wire.write_run_header(self._chunk, kind, self.seq, self._off - _HEADER_BYTES, self.part)
        try:
            self._publish_held()
        except BaseException:
            if not self._held and obs is not None:  # published, then interrupted
                obs.end(WRITER_ACTOR, WRITER_INTERRUPTED_AFTER_PUBLISH, self.seq, self._obj,
                        KIND_OF[kind])
            raise
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_PUBLISH_RUN_CHUNK, self.seq, self._obj, KIND_OF[kind])

    def _publish_held(self) -> None:
        """Publish the held chunk: the run moves past it (its part is used). Interrupted
        before the publish store it stays held (publish it again, or the ABORT goes in
        it); after the store (an asynchronous exception at any call in the rest) the
        run has moved past it all the same."""
        cursor = self.cursor
        i = cursor.index
        try:
            cursor.publish()
            at = cursor.published_at
            if at is not None:  # the queue keeps it: its writer's stall line
                at[i] = monotonic()
        except BaseException:
            if cursor.settle(i):
                self._passed()
            raise
        self._passed()

    def _passed(self) -> None:
        self._chunk = _NO_CHUNK
        self._held = False
        self.part += 1

    def settle(self) -> None:
        """A cut between a publish store and the bookkeeping after it (the part count,
        the run's end) is caught up with: the chunk claimed last is out if its written
        flag is set (its claim cleared it; an index compare cannot tell in a ring of one
        chunk), so the run moves past it now; past its LAST or ABORT, it is over."""
        # spec: WriterSettleRun -- the part count and the run's end caught up
        cursor = self.cursor
        if self._held and not cursor.holding and cursor.settle(self._at):
            self._passed()
        if not self._held and self._kind in _ENDS:
            self._end()

    def withdraw(self) -> None:
        """Nothing of the run was published (part 0): its chunk, if claimed, is let go
        unpublished (``WriterAbort``) and the run is over without a trace: no reader
        saw its message begin, and its sequence number is unused."""
        # spec: WriterWithdrawRun -- nothing of the run was out: nothing sent, seq unused
        cursor = self.cursor
        if cursor.holding:
            cursor.abort()
        self._chunk = _NO_CHUNK
        self._held = False
        self.active = False
        self._obj = None
        self._watch = None

    def abort(self, reason: str, deadline: Deadline) -> None:
        """Publish ABORT (with ``reason``) as the run's next part, in the chunk being
        filled if one is held, else in the next one (waiting at most ``deadline``)."""
        if not self.holding:
            self._claim(deadline)
        obs = self.observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterAbortRun -- ABORT(seq, next part): readers raise for this message
        self._kind = wire.RUN_ABORT
        wire.write_abort(self._chunk, self.seq, self.part, reason)
        obj = self._obj
        try:
            self._publish_held()
        finally:
            if not self._held:  # ABORT published (an interrupt may have come after it)
                self._end()
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_ABORT_RUN, self.seq, obj, "abort")


class Spill:
    """The file a Pickler writes one message to (the serializer's
    :class:`~..serialization.Sink`): in memory while the message fits one chunk (its
    parts, as ``pickle.dumps`` would give them), a run from the first byte that does
    not (the fit rule: ``fits`` applied to :mod:`..wire`'s sizes)."""

    def __init__(self, run: RunWriter, fits: Callable[[int], bool]) -> None:
        self.run = run
        self._fits = fits
        self._parts: list[Any] = []
        self._size = 0  # the bytes of an INLINE chunk holding what was kept so far
        self._buffers: list[memoryview] = []  # the out-of-band buffers kept
        self._seq = -1
        self._deadline = FOREVER
        self._watch: Callable[[], None] = _no_watch
        self._obj: object = None
        self._streamed = False  # this message went into a run
        self._raised: BaseException | None = None  # this file's own exception, if any

    def arm(self, seq: int, deadline: Deadline, watch: Callable[[], None], obj: object) -> None:
        """Start message ``seq``."""
        self._parts.clear()
        self._buffers = []
        self._size = _HEADER_BYTES
        self._seq = seq
        self._deadline = deadline
        self._watch = watch
        self._obj = obj
        self._streamed = False
        self._raised = None

    def disarm(self) -> None:
        """Hold no reference to the last message, nor to its exception (whose traceback
        holds the caller's frames: the writer, in a cycle)."""
        self._parts.clear()
        self._buffers = []
        self._obj = None
        self._watch = _no_watch
        self._raised = None

    def keep_out_of_band(self, buf: memoryview) -> bool:
        """Whether ``buf`` travels out of band (kept): yes while the message still fits
        one chunk with it; no once it is a run (in band: streamed)."""
        size = self._size + wire.buffer_bytes(buf.nbytes)
        if self._streamed or not self._fits(size):
            return False
        self._size = size
        self._buffers.append(buf)
        return True

    def raised(self, exc: BaseException) -> bool:
        return exc is self._raised

    def finish(self, wrapped: bool) -> wire.Pickled | None:
        if self._streamed:
            return None
        parts = self._parts
        stream = parts[0] if len(parts) == 1 else b"".join(parts)
        return stream, self._buffers, wrapped

    def write(self, b: Any) -> int:
        try:
            if self._streamed:
                return self.run.write(b)
            n = len(b) if type(b) is bytes else memoryview(b).nbytes
            self._parts.append(b)
            self._size += n
            if not self._fits(self._size):
                self._spill()
            return n
        except BaseException as exc:
            self._raised = exc
            raise

    def _spill(self) -> None:
        """The message does not fit one chunk: begin its run with what was kept."""
        run = self.run
        run.begin(self._seq, self._deadline, self._watch, self._obj)
        self._streamed = True
        run.write_head(self._buffers)
        self._buffers.clear()
        for part in self._parts:
            run.write(part)
        self._parts.clear()


def _no_watch() -> None:
    return None


#: How a run is ended when the writer cannot finish it: ``abort(run, reason, deadline)``
#: (the writer's ``abort_run``: ABORT in the ring, and to remote readers, or a withdrawal).
Abort = Callable[[RunWriter, str, Deadline], None]


def unbound_abort(run: RunWriter, reason: str, deadline: Deadline) -> None:
    """A run sender's abort between the writer's calls: no run is sent there."""
    raise AssertionError("a run is aborted only inside the writer's enqueue")


class RunSender:
    """The writer half (a :class:`..LargeSender`): large objects of
    ``large_objects="stream"`` as runs of chunks.
    With ``spill`` (no remote reader needs the object whole) they are pickled
    straight into the run; else pickled first, then written."""

    def __init__(
        self, cursor: WriterCursor, observer: QueueObserver | None, who: Callable[[], str],
        fits: Callable[[int], bool], spill: bool,
    ) -> None:
        self.run = RunWriter(cursor, observer)
        self._who = who
        #: The abort for the enqueue in progress (the writer's ``CutCalls.abort_run``):
        #: set by the writer for that call and cleared as it ends.
        self.abort: Abort = unbound_abort
        #: Pickle straight into the run (no remote reader needs the object whole).
        self.spill = spill
        self._file = Spill(self.run, fits)

    @property
    def active(self) -> bool:
        """A run is begun and not ended (its abort is due if the writer was left)."""
        return self.run.active

    def dump(
        self, serializer: Serializer, obj: Any, seq: int, deadline: Deadline,
        watch: Callable[[], None],
    ) -> wire.Pickled | None:
        """``obj`` pickled: what fits one chunk is returned; a larger object is
        pickled straight into a run of chunks (``None``: sent)."""
        run = self.run
        spill = self._file
        spill.arm(seq, deadline, watch, obj)
        try:
            p = serializer.dump_into(obj, spill)
        except MisuseError as exc:
            if not run.active:
                raise
            self.abort(run, f"pickling raised {exc.__cause__!r}", deadline)
            raise MisuseError(
                f"{self._who()}: cannot serialize message seq {seq} (an object of type "
                f"{type(obj).__module__}.{type(obj).__qualname__}): {exc.__cause__!r} after "
                f"{run.part - 1} of its chunks were published; the message was aborted (every "
                "reader raises MessageAbortedError for it)"
            ) from exc.__cause__
        except BaseException as exc:  # KeyboardInterrupt and the like
            self.abort_if_holding(exc)
            raise
        finally:
            spill.disarm()
        if p is None:
            run.finish()
        return p

    def send(
        self, seq: int, p: wire.Pickled, deadline: Deadline, watch: Callable[[], None],
        obj: Any,
    ) -> bool:
        """``p`` (pickled already: remote readers need it whole) as a run of chunks
        (a :class:`..LargeSender`: no frame follows on the local socket)."""
        run = self.run
        run.begin(seq, deadline, watch, obj)  # a timeout here leaves no trace
        try:
            run.write_head(p[1])
            run.write(p[0])
        except BaseException as exc:
            self.abort_if_holding(exc)
            raise
        run.finish()
        return False

    def abort_if_holding(self, exc: BaseException) -> None:
        """An asynchronous exception mid-run: if the run holds a chunk, ABORT goes in it
        now (no wait); else the abort is due at the next call."""
        # spec: WriterInterruptedInRun -- the run is cut: its abort (or withdrawal) is due
        run = self.run
        if run.active and run.holding:
            reason = f"the writer was interrupted ({type(exc).__name__})"
            self.abort(run, reason, FOREVER)
