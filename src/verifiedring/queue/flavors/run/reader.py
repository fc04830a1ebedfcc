"""The run flavor's reader half: a run of chunks unpickled straight out of the ring."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from ....errors import (
    BrokenPeerError,
    MessageAbortedError,
    MisuseError,
)
from ....hugepages import MIN_BYTES as HUGE_BUFFER
from ....hugepages import advise_huge_pages
from ....ring import ReaderCursor
from ....steps import READER_READ_RUN_CHUNK, READER_RELEASE_RUN_CHUNK, QueueObserver
from ....waiting import FOREVER, StallLog, wait_for
from ... import wire
from ...outcomes import ReaderOutcomes
from . import KIND_OF, bytes_view

_HEADER_BYTES = wire.HEADER_BYTES
_LENGTH_BYTES = wire.LENGTH.size
_NO_VIEW = memoryview(b"")
#: What :attr:`RunReceiver.decoded` holds while no object of the run was decoded.
NOT_DECODED: Any = object()


def no_interval() -> float:
    """A run's stall interval outside the calls that read it."""
    raise AssertionError("a run waits only inside RunReceiver.load or finish_interrupted")


def unwatched() -> None:
    """A run's watch outside the calls that read it: a run waits only inside them."""
    raise AssertionError("a run waits only inside RunReceiver.load or finish_interrupted")


class RunReader:
    """A file over one run of chunks for the unpickler: ``read``, ``readinto``,
    ``readline``; each chunk is released once its bytes are consumed."""

    def __init__(
        self, cursor: ReaderCursor, outcomes: ReaderOutcomes, observer: QueueObserver | None,
        actor: str,
    ) -> None:
        self._cursor = cursor
        self._outcomes = outcomes
        #: The reader's watch while it waits for a chunk, and its stall-log interval: set
        #: by :class:`RunReceiver` for the call that reads (no reference kept after it:
        #: no cycle back to the reader).
        self.watch: Callable[[], None] = unwatched
        self.stall_interval: Callable[[], float] = no_interval
        self._observer = observer
        self._actor = actor
        # Invariant: _held iff _view is the taken chunk's bytes of the run (else _NO_VIEW).
        self._view = _NO_VIEW
        self._held = False
        self._pos = 0
        self._kind = wire.RUN_LAST
        self.seq = -1
        self.part = 0
        # Invariant: a run is being read (its first chunk taken, its LAST or ABORT not
        # released).
        self.active = False

    def begin(self, seq: int, chunk: memoryview, nbytes: int) -> None:
        """Take over the taken FIRST chunk of message ``seq`` (``nbytes`` of the run)."""
        self.seq = seq
        self.part = 0
        self._kind = wire.RUN_FIRST
        self._view = chunk[_HEADER_BYTES : _HEADER_BYTES + nbytes]
        self._held = True
        self._pos = 0
        self.active = True

    def resume(self, seq: int) -> None:
        """The run of message ``seq`` whose FIRST chunk was released before the run
        began (an interrupt cut it): its rest is read from part 1."""
        self.seq = seq
        self.part = 0
        self._kind = wire.RUN_FIRST
        self._view = _NO_VIEW
        self._held = False
        self._pos = 0
        self.active = True

    # --- the file -----------------------------------------------------------------

    def readinto(self, b: Any) -> int:
        target = bytes_view(b)
        n = len(target)
        if n >= HUGE_BUFFER:
            advise_huge_pages(target)  # a fresh buffer: 2 MiB pages fault 512x less
        filled = 0
        while filled < n:
            view = self._view
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
            raise MisuseError(f"{self._outcomes.who()}: read() of a whole run is not supported")
        view = self._view
        pos = self._pos
        if len(view) - pos >= n:  # the common case: one copy
            self._pos = pos + n
            return bytes(view[pos : pos + n])
        out = bytearray(n)
        got = self.readinto(out)
        return bytes(out[:got])

    def readline(self) -> bytes:
        out = bytearray()
        while True:
            view = self._view
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
        nbuf = wire.read_length(self._exactly(_LENGTH_BYTES))
        lengths = wire.buffer_lengths(self._exactly(_LENGTH_BYTES * nbuf), nbuf)
        buffers = []
        for n in lengths:
            buf = bytearray(n)
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
        if self._held:
            self._release(None)
        self._next()
        return True

    @property
    def at_end(self) -> bool:
        """Every byte of the run was consumed (its LAST is held, not yet released)."""
        return self._kind == wire.RUN_LAST and self._held and self._pos == len(self._view)

    def skip_rest(self, outcome: object) -> None:
        """Read and release the rest of the run, to its LAST (released as the step that
        delivers ``outcome``) or its ABORT (raises :class:`MessageAbortedError`). Also
        after an interrupt at any point of a read."""
        while self.active:
            if self._held and not self._cursor.holding:  # a release cut after its store
                self._caught_up()
            elif not self._held:
                self._next()
            elif self._kind == wire.RUN_LAST:
                self._release(outcome)
            else:
                self._release(None)

    def _caught_up(self) -> None:
        """The held chunk was released (an interrupt cut the bookkeeping after the
        cursor's release): the run moves past it; past its LAST or ABORT, it is over."""
        view = self._view
        self._view = _NO_VIEW
        self._held = False
        if self._kind in (wire.RUN_LAST, wire.RUN_ABORT):
            self.active = False
        view.release()

    def _release(self, outcome: object) -> None:
        view = self._view
        held = self._held
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        # spec: ReaderReleaseRunChunk -- only once its bytes are consumed; LAST: delivered
        last = self._kind in (wire.RUN_LAST, wire.RUN_ABORT)
        self._cursor.release()  # interrupted at its start: still held
        self._view = _NO_VIEW
        self._held = False
        if last:
            self.active = False
        if held:  # the one call after the stores: a cut at its return finds them done
            view.release()
        if obs is not None:
            obs.end(self._actor, READER_RELEASE_RUN_CHUNK, self.seq, outcome if last else None,
                    KIND_OF[self._kind])

    def _next(self) -> None:
        """Wait for the run's next chunk and read its header (ABORT: released, then
        :class:`MessageAbortedError`). A chunk an interrupt left taken is read now (one
        of this run already read, its FIRST, is released first)."""
        cursor = self._cursor
        if cursor.holding and wire.read_header(cursor.held())[3] <= self.part:
            cursor.release()
        held = cursor.holding
        if not held and not cursor.poll():
            wait_for(cursor.poll, FOREVER, self._stall, _never, self.watch, cursor.sleeper)
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        # spec: ReaderReadRunChunk -- MORE, LAST or ABORT of this run's seq, next part
        chunk = cursor.held() if held else cursor.take()
        kind, seq, nbytes, part = wire.read_header(chunk)
        ok = kind in wire.RUN_NEXT_KINDS and seq == self.seq and part == self.part + 1
        if ok:
            self._kind = kind
            self.part = part
            self._view = chunk[_HEADER_BYTES : _HEADER_BYTES + nbytes]
            self._held = True
            self._pos = 0
        if obs is not None:
            obs.end(self._actor, READER_READ_RUN_CHUNK, seq, None, KIND_OF.get(kind, "?"))
        if not ok:
            index = cursor.index
            cursor.release()
            self.active = False
            raise BrokenPeerError(
                f"{self._outcomes.who()}: in ring chunk {index} got {wire.kind_name(kind)} "
                f"seq {seq} part {part}, expected part {self.part + 1} (RUN_MORE, RUN_LAST or "
                f"RUN_ABORT) of message seq {self.seq}: the run was broken"
            )
        if kind == wire.RUN_ABORT:
            aborted = MessageAbortedError(self.seq, part, wire.abort_reason(self._view))
            self._release(aborted)
            raise aborted

    def _stall(self) -> StallLog:
        return StallLog(self._describe, self.stall_interval())

    def close(self) -> None:
        """Let go of the chunk a run holds (the ring is closing): no view stays on it."""
        if self._held:
            self._view.release()
        self._view = _NO_VIEW
        self._held = False
        self.active = False

    def _describe(self) -> str:
        c = self._cursor
        return (
            f"{self._outcomes.who()} waits for part {self.part + 1} of message seq {self.seq} "
            f"(a run) in ring chunk {c.index} ({c.flag_state()})"
        )


def _never(waited: float) -> Exception:
    raise AssertionError("a run's wait has no deadline")
