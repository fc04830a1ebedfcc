"""The ring's two sides: :class:`WriterCursor` and :class:`ReaderCursor`.

Algorithm (model: ``spec/RingBuffer.tla``; layout: :mod:`verifiedring.layout`)
------------------------------------------------------------------------------
Each side keeps its own chunk index; neither ever reads the other's index.
Every row is one load or one store of a flag byte, one spec action, and one
``# spec:`` site below; ``FWn``/``FRn`` are the fences of
:mod:`verifiedring.ordering`, placed after the step they follow.

Writer, one message, at chunk ``i = windex``::

    WriterPollWritten    load written[i]; 0: the chunk is free            FW1
    WriterPollReadFlag   written[i] was 1: load read[i][r], r = 0..N-1;
                         the first 0 fails the poll; all 1: free          FW1
    WriterClearWritten   written[i] = 0                                   FW2
    WriterFillPayload    the caller stores the payload into chunk i       FW3
    WriterClearReadFlag  read[i][r] = 0, one byte store per reader        FW4
    WriterPublish        written[i] = 1; windex = (i + 1) % max_chunks
    (WriterAbort         the caller raised: stop after WriterFillPayload;
                         chunk i stays unpublished and is reused next)

Reader ``k``, at chunk ``i = rindex``::

    ReaderPollReadFlag   load read[i][k]; 1: the poll fails               FR0
    ReaderPollWritten    load written[i]; 0: the poll fails               FR1
    ReaderReadPayload    the caller loads the payload of chunk i          FR2
    ReaderRelease        read[i][k] = 1; rindex = (i + 1) % max_chunks
                         (also when the caller raised: the writer never stalls)

The reader loads its own flag before ``written``: in the other order a stale
``written == 1`` from the chunk's previous lap, then a flag just cleared by
the writer, lets a reader consume a chunk before ``WriterPublish`` (TLC:
``PublishedBeforeReadInv``). The writer's read-flag loads are safe one at a
time because a read flag only goes 0 -> 1 while the writer waits. The
invariants TLC checks for exactly these steps are listed, with the models
and their bounds, in ``spec/README.md``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from .errors import ClosedError, MisuseError, RingTimeoutError
from .layout import WRITTEN_POSITION
from .ordering import fence
from .steps import (
    READER_POLL_READ_FLAG,
    READER_POLL_WRITTEN,
    READER_READ_PAYLOAD,
    READER_RELEASE,
    WRITER_ABORT,
    WRITER_ACTOR,
    WRITER_CLEAR_READ_FLAG,
    WRITER_CLEAR_WRITTEN,
    WRITER_FILL_PAYLOAD,
    WRITER_POLL_READ_FLAG,
    WRITER_POLL_WRITTEN,
    WRITER_PUBLISH,
    StepObserver,
    reader_actor,
)
from .waiting import Deadline, StallLog, wait_for

if TYPE_CHECKING:
    from .ring import ShmRingBuffer

#: Roles claimed in this process, per segment: (segment name, reader index) for a
#: reader, (segment name, None) for the writer. Two cursors of one role on one
#: segment in one process would break the single-writer / own-flag rules.
claimed_roles: set[tuple[str, int | None]] = set()


class _Cursor:
    """State shared by both cursor kinds: views, index, hold state."""

    actor: str

    def __init__(
        self, ring: ShmRingBuffer, observer: StepObserver | None, log_interval: float
    ) -> None:
        self._ring = ring
        self._name = ring.name
        self._n_reader = ring.layout.n_reader
        self._max_chunks = ring.layout.max_chunks
        self._data = ring._data_views
        self._flags = ring._flag_views
        self.observer = observer
        self.log_interval = log_interval
        self.index = 0  # the next chunk this side will use; private to this side
        self._holding = False
        self._closed = False  # set when the ring closes (it detaches every cursor)
        self._claim_key: tuple[str, int | None] = (ring.name, None)

    def _refuse(self) -> None:
        """Raise the error that explains why this cursor cannot acquire now."""
        if self._closed:
            raise ClosedError(f"{self.actor} of ring {self._name!r}: the ring is closed")
        if self._holding:
            raise MisuseError(
                f"{self.actor} of ring {self._name!r} already holds chunk {self.index}: "
                "finish the current with-block before acquiring again"
            )

    def flag_state(self) -> str:
        """The flag bytes of this side's current chunk, for diagnostics (not ordered)."""
        flags = self._flags[self.index]
        return f"written={flags[WRITTEN_POSITION]}, read flags={list(flags[1:])}"

    def _stall_log(self) -> StallLog:
        return StallLog(self._describe_wait, self.log_interval)

    def _describe_wait(self) -> str:
        raise NotImplementedError

    def _detach(self) -> None:
        self._closed = True
        claimed_roles.discard(self._claim_key)


class WriterCursor(_Cursor):
    """The single writer of a ring. Use ``with w.acquire_write() as buf:``."""

    actor = WRITER_ACTOR

    def __init__(
        self, ring: ShmRingBuffer, observer: StepObserver | None, log_interval: float
    ) -> None:
        super().__init__(ring, observer, log_interval)
        #: What messages call each reader (by index), e.g. its rank, pid and host.
        self.reader_names: list[str] | None = None
        #: (reader index, its flag's position in a chunk's flag block), in reader order.
        self._positions = tuple(
            (r, ring.layout.read_flag_position(r)) for r in range(self._n_reader)
        )

    def acquire_write(self, timeout: float | None = None) -> WriterCursor:
        """Wait until the next chunk is free; ``with`` it to fill and publish it.

        On normal exit of the ``with`` body the chunk is published to every
        reader; if the body raises, it stays unpublished and the next write
        reuses it. Raises :class:`RingTimeoutError` if the chunk is not free
        within ``timeout`` seconds.
        """
        return self.claim(Deadline.after(timeout))

    def claim(
        self, deadline: Deadline, watch: Callable[[], None] | None = None
    ) -> WriterCursor:
        """:meth:`acquire_write` with the caller's :class:`Deadline`; ``watch`` is
        called while it waits (it raises to end the wait: a reader has died)."""
        if self._closed or self._holding:
            self._refuse()
        if not self._poll_free():
            wait_for(self._poll_free, deadline, self._stall_log, self._timed_out, watch)
        return self

    def _poll_free(self) -> bool:
        i = self.index
        flags = self._flags[i]
        obs = self.observer
        # spec: WriterPollWritten
        if obs is not None:
            obs.before_step(WRITER_ACTOR, WRITER_POLL_WRITTEN, i, None)
        written = flags[WRITTEN_POSITION]
        if obs is not None:
            obs.after_step(WRITER_ACTOR, WRITER_POLL_WRITTEN, i, None)
        if written:
            for r, pos in self._positions:
                # spec: WriterPollReadFlag (one load per reader, in order)
                if obs is not None:
                    obs.before_step(WRITER_ACTOR, WRITER_POLL_READ_FLAG, i, r)
                seen = flags[pos]
                if obs is not None:
                    obs.after_step(WRITER_ACTOR, WRITER_POLL_READ_FLAG, i, r)
                if not seen:
                    return False
        fence()  # FW1: the loads that saw the chunk free before any store of this write
        return True

    def __enter__(self) -> memoryview:
        if self._closed or self._holding:
            self._refuse()
        i = self.index
        obs = self.observer
        # spec: WriterClearWritten
        if obs is not None:
            obs.before_step(WRITER_ACTOR, WRITER_CLEAR_WRITTEN, i, None)
        self._flags[i][WRITTEN_POSITION] = 0
        fence()  # FW2: written = 0 before the payload stores
        if obs is not None:
            obs.after_step(WRITER_ACTOR, WRITER_CLEAR_WRITTEN, i, None)
            # spec: WriterFillPayload (the caller's with-body)
            obs.before_step(WRITER_ACTOR, WRITER_FILL_PAYLOAD, i, None)
        self._holding = True
        return self._data[i]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        i = self.index
        obs = self.observer
        self._holding = False
        if obs is not None:
            obs.after_step(WRITER_ACTOR, WRITER_FILL_PAYLOAD, i, None)
        if exc_type is not None:
            # spec: WriterAbort -- no flag store; written[i] stays 0, index stays i
            if obs is not None:
                obs.before_step(WRITER_ACTOR, WRITER_ABORT, i, None)
                obs.after_step(WRITER_ACTOR, WRITER_ABORT, i, None)
            return
        flags = self._flags[i]
        fence()  # FW3: payload stores before the read-flag clears
        for r, pos in self._positions:
            # spec: WriterClearReadFlag (one single-byte store per reader, in order)
            if obs is not None:
                obs.before_step(WRITER_ACTOR, WRITER_CLEAR_READ_FLAG, i, r)
            flags[pos] = 0
            if obs is not None:
                obs.after_step(WRITER_ACTOR, WRITER_CLEAR_READ_FLAG, i, r)
        fence()  # FW4: read-flag clears before written = 1
        # spec: WriterPublish
        if obs is not None:
            obs.before_step(WRITER_ACTOR, WRITER_PUBLISH, i, None)
        flags[WRITTEN_POSITION] = 1
        self.index = (i + 1) % self._max_chunks
        if obs is not None:
            obs.after_step(WRITER_ACTOR, WRITER_PUBLISH, i, None)

    def unread_by(self) -> list[int]:
        """Local reader indices that have not read the writer's current chunk."""
        flags = self._flags[self.index]
        return [r for r, pos in self._positions if flags[pos] == 0]

    def _unread(self) -> str:
        unread = self.unread_by()
        names = self.reader_names
        who = "" if names is None else " (" + ", ".join(names[r] for r in unread) + ")"
        return f"readers {unread}{who} have not read it"

    def _describe_wait(self) -> str:
        return (
            f"writer of ring {self._name!r} waits for chunk {self.index} to be free "
            f"({self.flag_state()}); {self._unread()}"
        )

    def _timed_out(self, waited: float) -> RingTimeoutError:
        return RingTimeoutError(
            f"writer (pid {os.getpid()}) of ring {self._name!r} timed out after {waited:.3f} s "
            f"on chunk {self.index}: saw {self.flag_state()}, expected written=0 or every "
            f"read flag 1; {self._unread()}"
        )


class ReaderCursor(_Cursor):
    """Local reader ``reader`` of a ring. Use ``with r.acquire_read() as buf:``."""

    def __init__(
        self,
        ring: ShmRingBuffer,
        reader: int,
        observer: StepObserver | None,
        log_interval: float,
    ) -> None:
        super().__init__(ring, observer, log_interval)
        self.reader = reader
        self.actor = reader_actor(reader)
        self._own = ring.layout.read_flag_position(reader)
        self._claim_key = (ring.name, reader)

    def acquire_read(self, timeout: float | None = None) -> ReaderCursor:
        """Wait for the next published chunk; ``with`` it to read it (read-only by contract).

        On exit of the ``with`` body the chunk is released (marked read by
        this reader), also when the body raises, so the writer never stalls
        on it. Raises :class:`RingTimeoutError` if nothing is published within
        ``timeout`` seconds.
        """
        return self.claim(Deadline.after(timeout))

    def claim(self, deadline: Deadline) -> ReaderCursor:
        """:meth:`acquire_read` with the caller's :class:`Deadline`."""
        if self._closed or self._holding:
            self._refuse()
        if not self.poll():
            wait_for(self.poll, deadline, self._stall_log, self._timed_out)
        return self

    def poll(self) -> bool:
        """One non-blocking poll: true when the next chunk is ready to be entered
        (``with`` the cursor then reads it; entering refuses a closed or held one)."""
        i = self.index
        flags = self._flags[i]
        obs = self.observer
        actor = self.actor
        # spec: ReaderPollReadFlag
        if obs is not None:
            obs.before_step(actor, READER_POLL_READ_FLAG, i, None)
        own = flags[self._own]
        if obs is not None:
            obs.after_step(actor, READER_POLL_READ_FLAG, i, None)
        if own:
            return False
        fence()  # FR0: own-flag load before the written load
        # spec: ReaderPollWritten
        if obs is not None:
            obs.before_step(actor, READER_POLL_WRITTEN, i, None)
        written = flags[WRITTEN_POSITION]
        if obs is not None:
            obs.after_step(actor, READER_POLL_WRITTEN, i, None)
        if not written:
            return False
        fence()  # FR1: the loads that saw the chunk ready before the payload loads
        return True

    def __enter__(self) -> memoryview:
        if self._closed or self._holding:
            self._refuse()
        if self.observer is not None:
            # spec: ReaderReadPayload (the caller's with-body)
            self.observer.before_step(self.actor, READER_READ_PAYLOAD, self.index, None)
        self._holding = True
        return self._data[self.index]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        i = self.index
        obs = self.observer
        self._holding = False
        if obs is not None:
            obs.after_step(self.actor, READER_READ_PAYLOAD, i, None)
        try:
            fence()  # FR2: payload loads before the release store
        finally:
            # spec: ReaderRelease -- also when the body raised, and when an asynchronous
            # exception (KeyboardInterrupt) is delivered at the fence call, which
            # CPython 3.11+ does once the call has returned; no call stands between
            # the store and the index update, so nothing can land between them.
            if obs is not None:
                obs.before_step(self.actor, READER_RELEASE, i, None)
            self._flags[i][self._own] = 1
            self.index = (i + 1) % self._max_chunks
            if obs is not None:
                obs.after_step(self.actor, READER_RELEASE, i, None)

    def _describe_wait(self) -> str:
        return (
            f"reader {self.reader} of ring {self._name!r} waits for chunk {self.index} "
            f"to be published ({self.flag_state()})"
        )

    def _timed_out(self, waited: float) -> RingTimeoutError:
        flags = self._flags[self.index]
        return RingTimeoutError(
            f"reader {self.reader} (pid {os.getpid()}) of ring {self._name!r} timed out after "
            f"{waited:.3f} s on chunk {self.index}: saw written={flags[WRITTEN_POSITION]}, "
            f"own read flag={flags[self._own]}, expected written=1 and own read flag 0"
        )
