"""Large objects streamed through the ring: one message as a *run* of chunks.

``MessageQueue(..., large_objects="stream")``. A message too large for one
chunk travels as chunks RUN_FIRST (part 0), RUN_MORE (parts 1, 2, ...) and
RUN_LAST, each with the message's ``seq`` and each a normal ring message (one
claim and one publish per chunk: ``RingBuffer.tla``'s proof holds per chunk).
Their bytes, in order, are one byte string (:mod:`.wire`)::

    u64 nbuf | nbuf u64 lengths | the buffers | the pickle stream

The writer pickles straight into chunks (:class:`Spill` is the pickler's file:
a message that fits one chunk stays in memory and is an INLINE chunk as ever;
from the first byte that does not fit, a :class:`RunWriter` takes over: a full
chunk is published and the next one claimed). Its memory does not grow with the
object beyond one chunk and the pickler's 64 KiB frame. Each reader unpickles
straight out of the chunks (:class:`RunReader` is the unpickler's file) and
releases each chunk once its bytes are consumed, so an object may be larger
than the whole ring. ``spec/MessageQueue.tla`` models the run:

* ``WriterPublishRunChunk`` -- :meth:`RunWriter._publish` (FIRST, MORE, LAST);
* ``WriterAbortRun`` -- :meth:`RunWriter.abort`: pickling raised after some
  chunks were published, or an asynchronous exception (KeyboardInterrupt)
  landed mid-run: in the chunk being filled at once, or -- landed while the
  writer waited for room -- at the start of its next call (enqueue, shutdown,
  close). The ABORT chunk carries
  the reason; every reader raises :class:`~verifiedring.errors.MessageAbortedError`
  for that message, and ``seq`` is used up;
* ``ReaderReadRunChunk`` -- :meth:`RunReader._next`: the next chunk must be
  MORE, LAST or ABORT with the run's ``seq`` and the next part, else
  :class:`~verifiedring.errors.BrokenPeerError`;
* ``ReaderReleaseRunChunk`` -- :meth:`RunReader._release`, only once the
  chunk's bytes were consumed.

A reader whose unpickler raises mid-run reads and releases the rest of the run
(to its LAST or ABORT) and only then raises DecodeError: the next dequeue
starts at the next message.

**Deadlines.** The caller's timeout bounds the wait for the run's *first*
chunk (writer: room for it; reader: its publication): before it nothing is
published or consumed, so retrying is safe. Once begun, a run is completed or
aborted: the rest waits at the peers' pace, watching for a reader or the writer
that died (named, :class:`~verifiedring.errors.BrokenPeerError`) and logging
who it waits for.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import BrokenPeerError, MessageAbortedError, MisuseError
from ..hugepages import MIN_BYTES as HUGE_BUFFER
from ..hugepages import advise_huge_pages
from ..ring import ReaderCursor, WriterCursor
from ..steps import (
    READER_READ_RUN_CHUNK,
    READER_RELEASE_RUN_CHUNK,
    WRITER_ABORT_RUN,
    WRITER_ACTOR,
    WRITER_PUBLISH_RUN_CHUNK,
    QueueObserver,
)
from ..waiting import FOREVER, Deadline, StallLog, wait_for
from . import wire

_HEADER = wire.HEADER
_HEADER_BYTES = wire.HEADER_BYTES
_LENGTH = wire.LENGTH
_KIND_OF = {
    wire.RUN_FIRST: "first", wire.RUN_MORE: "more", wire.RUN_LAST: "last",
    wire.RUN_ABORT: "abort",
}


def _bytes_view(b: Any) -> memoryview:
    """``b`` (bytes, bytearray, PickleBuffer, memoryview) as a flat byte view."""
    view = memoryview(b)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class RunWriter:
    """Writes one message's bytes, as they come, into a run of chunks of ``cursor``."""

    def __init__(self, cursor: WriterCursor) -> None:
        self.cursor = cursor
        self.observer: QueueObserver | None = None
        self._chunk: memoryview | None = None  # the claimed chunk being filled
        self._end = 0  # its size
        self._off = 0  # where its next byte goes
        self._watch: Callable[[], None] | None = None
        self.seq = -1
        self.part = 0  # the part number of the chunk being filled
        #: A run was begun and neither its LAST nor its ABORT is published.
        self.active = False
        self._obj: object = None  # for the observer

    def begin(
        self, seq: int, deadline: Deadline, watch: Callable[[], None], obj: object
    ) -> None:
        """Claim the run's first chunk, waiting at most ``deadline`` (nothing is
        published before it: a timeout leaves no trace)."""
        self._watch = watch
        self.seq = seq
        self.part = 0
        self._claim(deadline)
        self._obj = obj  # after the claim: a timeout keeps no reference to it
        self.active = True

    def _claim(self, deadline: Deadline) -> None:
        cursor = self.cursor
        cursor.claim(deadline, self._watch)
        chunk = cursor.__enter__()
        self._chunk = chunk
        self._end = len(chunk)
        self._off = _HEADER_BYTES

    @property
    def holding(self) -> bool:
        """A claimed chunk is being filled (an ABORT can go in it without a wait)."""
        return self._chunk is not None and self.cursor.holding

    def write(self, b: Any) -> int:
        """Append ``b``'s bytes to the run: fill the chunk, publish it when full and
        more follows, claim the next (waiting as long as the readers are alive)."""
        view = _bytes_view(b)
        n = len(view)
        pos = 0
        while pos < n:
            chunk = self._chunk
            if chunk is None:
                self._claim(FOREVER)
                continue
            room = self._end - self._off
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
        head = bytearray(_LENGTH.size * (1 + len(buffers)))
        _LENGTH.pack_into(head, 0, len(buffers))
        for i, b in enumerate(buffers):
            _LENGTH.pack_into(head, _LENGTH.size * (i + 1), b.nbytes)
        self.write(head)
        for b in buffers:
            self.write(b)

    def finish(self) -> None:
        """Publish the chunk being filled as the run's LAST."""
        self._publish(wire.RUN_LAST)
        self.active = False
        self._obj = None
        self._watch = None

    def _publish(self, kind: int) -> None:
        chunk = self._chunk
        assert chunk is not None
        obs = self.observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterPublishRunChunk -- FIRST, MORE or LAST of message seq (one ring message)
        if self.part == 0 and kind == wire.RUN_MORE:
            kind = wire.RUN_FIRST
        _HEADER.pack_into(chunk, 0, kind, self.seq, self._off - _HEADER_BYTES, self.part)
        self.cursor.__exit__(None, None, None)  # interrupted at its start: still held
        self._chunk = None
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_PUBLISH_RUN_CHUNK, self.seq, self._obj, _KIND_OF[kind])
        self.part += 1

    def abort(self, reason: str, deadline: Deadline) -> None:
        """Publish ABORT (with ``reason``) as the run's next part, in the chunk being
        filled if one is held, else in the next one (waiting at most ``deadline``)."""
        if not self.holding:
            self._claim(deadline)
        chunk = self._chunk
        assert chunk is not None
        obs = self.observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterAbortRun -- ABORT(seq, next part): readers raise for this message
        text = reason.encode("utf-8", "replace")[: self._end - _HEADER_BYTES]
        chunk[_HEADER_BYTES : _HEADER_BYTES + len(text)] = text
        _HEADER.pack_into(chunk, 0, wire.RUN_ABORT, self.seq, len(text), self.part)
        self.cursor.__exit__(None, None, None)
        self._chunk = None
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_ABORT_RUN, self.seq, self._obj, "abort")
        self.active = False
        self._obj = None
        self._watch = None
        self.part += 1


class Spill:
    """The file a Pickler writes one message to: in memory while the message fits one
    chunk (``parts``, as ``pickle.dumps`` would give it), a run from the first byte
    that does not."""

    def __init__(self, run: RunWriter, capacity: int) -> None:
        self.run = run
        self._capacity = capacity  # bytes an INLINE chunk may hold
        self.parts: list[Any] = []
        self._size = 0
        #: Where the serializer keeps the out-of-band buffers it takes
        #: (:meth:`keep_out_of_band`), set by it for each message.
        self.buffers: list[memoryview] = []
        self._seq = -1
        self._deadline = FOREVER
        self._watch: Callable[[], None] = _no_watch
        self._obj: object = None
        self.streamed = False  # this message went into a run
        #: The exception this file raised, if any (not the pickler's own).
        self.raised: BaseException | None = None

    def arm(self, seq: int, deadline: Deadline, watch: Callable[[], None], obj: object) -> None:
        """Start message ``seq``."""
        self.parts.clear()
        self._size = _HEADER_BYTES
        self._seq = seq
        self._deadline = deadline
        self._watch = watch
        self._obj = obj
        self.streamed = False
        self.raised = None

    def disarm(self) -> None:
        """Hold no reference to the last message."""
        self.parts.clear()
        self.buffers = []
        self._obj = None
        self._watch = _no_watch

    def keep_out_of_band(self, nbytes: int) -> bool:
        """Whether a buffer of ``nbytes`` may travel out of band: yes while the message
        still fits one chunk with it; no once it is a run (in band: streamed)."""
        if self.streamed or self._size + _LENGTH.size + nbytes > self._capacity:
            return False
        self._size += _LENGTH.size + nbytes
        return True

    def write(self, b: Any) -> int:
        try:
            if self.streamed:
                return self.run.write(b)
            n = len(b) if type(b) is bytes else memoryview(b).nbytes
            self.parts.append(b)
            self._size += n
            if self._size > self._capacity:
                self._spill()
            return n
        except BaseException as exc:
            self.raised = exc
            raise

    def _spill(self) -> None:
        """The message does not fit one chunk: begin its run with what was kept."""
        run = self.run
        run.begin(self._seq, self._deadline, self._watch, self._obj)
        self.streamed = True
        run.write_head(self.buffers)
        self.buffers.clear()
        for part in self.parts:
            run.write(part)
        self.parts.clear()


def _no_watch() -> None:
    return None


class RunOwner(Protocol):
    """What a :class:`RunReader` asks its queue reader."""

    def who(self) -> str: ...

    def watch_run(self) -> None: ...

    def log_every(self) -> float: ...


class RunReader:
    """A file over one run of chunks for the unpickler: ``read``, ``readinto``,
    ``readline``; each chunk is released once its bytes are consumed."""

    def __init__(
        self, cursor: ReaderCursor, owner: RunOwner, observer: QueueObserver | None, actor: str
    ) -> None:
        self._cursor = cursor
        self._owner = owner  # a weak proxy: no cycle, ``mq = None`` frees the reader
        self._observer = observer
        self._actor = actor
        self._view: memoryview | None = None  # the held chunk's bytes of the run
        self._pos = 0
        self._kind = wire.RUN_LAST
        self.seq = -1
        self.part = 0
        #: A run is being read (its first chunk taken, its LAST or ABORT not released).
        self.active = False

    def begin(self, seq: int, chunk: memoryview, nbytes: int) -> None:
        """Take over the held FIRST chunk of message ``seq`` (``nbytes`` of the run)."""
        self.seq = seq
        self.part = 0
        self._kind = wire.RUN_FIRST
        self._view = chunk[_HEADER_BYTES : _HEADER_BYTES + nbytes]
        self._pos = 0
        self.active = True

    # --- the file -----------------------------------------------------------------

    def readinto(self, b: Any) -> int:
        target = _bytes_view(b)
        n = len(target)
        if n >= HUGE_BUFFER:
            advise_huge_pages(target)  # a fresh buffer: 2 MiB pages fault 512x less
        filled = 0
        while filled < n:
            view = self._view
            assert view is not None
            avail = len(view) - self._pos
            if not avail:
                if not self._advance():
                    break
                continue
            k = min(avail, n - filled)
            pos = self._pos
            target[filled : filled + k] = view[pos : pos + k]
            self._pos = pos + k
            filled += k
        return filled

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            raise MisuseError(f"{self._owner.who()}: read() of a whole run is not supported")
        view = self._view
        pos = self._pos
        if view is not None and len(view) - pos >= n:  # the common case: one copy
            self._pos = pos + n
            return bytes(view[pos : pos + n])
        out = bytearray(n)
        got = self.readinto(out)
        return bytes(out[:got])

    def readline(self) -> bytes:
        out = bytearray()
        while True:
            view = self._view
            assert view is not None
            pos = self._pos
            window = bytes(view[pos : pos + 4096])
            i = window.find(b"\n")
            if i >= 0:
                out += window[: i + 1]
                self._pos = pos + i + 1
                return bytes(out)
            out += window
            self._pos = pos + len(window)
            if self._pos == len(view) and not self._advance():
                return bytes(out)

    def load(self) -> Any:
        """The message's object: the buffer table, the buffers, then the unpickler."""
        (nbuf,) = _LENGTH.unpack(self._exactly(_LENGTH.size))
        table = self._exactly(_LENGTH.size * nbuf)
        buffers = []
        for i in range(nbuf):
            buf = bytearray(_LENGTH.unpack_from(table, _LENGTH.size * i)[0])
            if self.readinto(buf) != len(buf):
                raise EOFError("the run ends inside an out-of-band buffer")
            buffers.append(buf)
        return pickle.Unpickler(self, buffers=buffers).load()

    def _exactly(self, n: int) -> bytes:
        data = self.read(n)
        if len(data) != n:
            raise EOFError(f"the run ends after {len(data)} of {n} bytes")
        return data

    # --- the chunks ---------------------------------------------------------------

    def _advance(self) -> bool:
        """Release the consumed chunk and read the next; false at the run's LAST."""
        if self._kind == wire.RUN_LAST:
            return False
        if self._view is not None:
            self._release(None)
        self._next()
        return True

    @property
    def at_end(self) -> bool:
        """Every byte of the run was consumed (its LAST is held, not yet released)."""
        view = self._view
        return self._kind == wire.RUN_LAST and view is not None and self._pos == len(view)

    def skip_rest(self, outcome: object) -> None:
        """Read and release the rest of the run, to its LAST (released as the step that
        delivers ``outcome``) or its ABORT (raises :class:`MessageAbortedError`). Also
        after an interrupt at any point of a read."""
        while self.active:
            if self._view is None:
                self._next()
            elif self._kind == wire.RUN_LAST:
                self._release(outcome)
            else:
                self._release(None)

    def _release(self, outcome: object) -> None:
        view = self._view
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        # spec: ReaderReleaseRunChunk -- only once its bytes are consumed; LAST: delivered
        last = self._kind in (wire.RUN_LAST, wire.RUN_ABORT)
        self._cursor.__exit__(None, None, None)  # interrupted at its start: still held
        self._view = None
        if view is not None:
            view.release()
        if last:
            self.active = False
        if obs is not None:
            obs.end(self._actor, READER_RELEASE_RUN_CHUNK, self.seq, outcome if last else None,
                    _KIND_OF[self._kind])

    def _next(self) -> None:
        """Wait for the run's next chunk and read its header (ABORT: released, then
        :class:`MessageAbortedError`)."""
        cursor = self._cursor
        if not cursor.poll():
            wait_for(cursor.poll, FOREVER, self._stall, _never, self._owner.watch_run,
                     cursor.sleeper)
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        # spec: ReaderReadRunChunk -- MORE, LAST or ABORT of this run's seq, next part
        chunk = cursor.__enter__()
        kind, seq, nbytes, part = _HEADER.unpack_from(chunk)
        ok = kind in wire.RUN_NEXT_KINDS and seq == self.seq and part == self.part + 1
        if ok:
            self._kind = kind
            self.part = part
            self._view = chunk[_HEADER_BYTES : _HEADER_BYTES + nbytes]
            self._pos = 0
        if obs is not None:
            obs.end(self._actor, READER_READ_RUN_CHUNK, seq, None, _KIND_OF.get(kind, "?"))
        if not ok:
            index = cursor.index
            cursor.__exit__(None, None, None)
            self.active = False
            raise BrokenPeerError(
                f"{self._owner.who()}: in ring chunk {index} got {wire.kind_name(kind)} seq {seq} "
                f"part {part}, expected part {self.part + 1} (RUN_MORE, RUN_LAST or "
                f"RUN_ABORT) of message seq {self.seq}: the run was broken"
            )
        if kind == wire.RUN_ABORT:
            view = self._view
            assert view is not None
            aborted = MessageAbortedError(self.seq, part, bytes(view).decode("utf-8", "replace"))
            self._release(aborted)
            raise aborted

    def _stall(self) -> StallLog:
        return StallLog(self._describe, self._owner.log_every())

    def close(self) -> None:
        """Let go of the chunk a run holds (the ring is closing): no view stays on it."""
        view = self._view
        self._view = None
        if view is not None:
            view.release()
        self.active = False

    def _describe(self) -> str:
        c = self._cursor
        return (
            f"{self._owner.who()} waits for part {self.part + 1} of message seq {self.seq} "
            f"(a run) in ring chunk {c.index} ({c.flag_state()})"
        )


def _never(waited: float) -> Exception:
    raise AssertionError("a run's wait has no deadline")
