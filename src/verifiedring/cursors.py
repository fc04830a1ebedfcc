"""The ring's two sides: :class:`WriterCursor` and :class:`ReaderCursor`.

Algorithm (model: ``spec/ring/RingBuffer.tla``; layout: :mod:`verifiedring.layout`)
------------------------------------------------------------------------------
Each side keeps its own chunk index; neither ever reads the other's index.
Every row is one load or one store of a flag byte, one spec action, and one
``# spec:`` site below; ``FWn``/``FRn`` are the fences of
:mod:`verifiedring.ordering`, placed after the step they follow.

Writer, one message, at chunk ``i = windex``::

    (reserve             writer-local: back the pages the fill will store to,
                         before the claim; SharedMemoryFullError: no step taken)
    WriterPollWritten    load written[i]; 0: the chunk is free            FW1
    WriterPollReadFlag   written[i] was 1: load read[i][r], r = 0..N-1;
                         the first 0 fails the poll; all 1: free          FW1
    WriterClearWritten   written[i] = 0                                   FW2
    WriterFillPayload    the caller stores the payload into chunk i       FW3
    WriterClearReadFlag  read[i][r] = 0, one byte store per reader        FW4
    WriterPublish        written[i] = 1; windex = (i + 1) % max_chunks
    (WriterAbort         the caller raised: stop after WriterFillPayload;
                         chunk i stays unpublished and is reused next)
    wake_sleepers (model: spec/sleep/ReaderSleep.tla), after every WriterPublish:   FS2
    WriterCheckSleep     load every sleep word (one copy and compare)
    WriterClearSleep     a word seen 1: store it = 0, then
    WriterWake           futex wake on it

Reader ``k``, at chunk ``i = rindex``::

    ReaderPollReadFlag   load read[i][k]; 1: the poll fails               FR0
    ReaderPollWritten    load written[i]; 0: the poll fails               FR1
    ReaderReadPayload    the caller loads the payload of chunk i          FR2
    ReaderRelease        read[i][k] = 1; rindex = (i + 1) % max_chunks
                         (also when the caller raised: the writer never stalls)
    sleep (model: spec/sleep/ReaderSleep.tla), once a wait outlasts its spin:
    ReaderAnnounceSleep  sleep[k] = 1                                     FS1
                         the re-check: poll() (ReaderPollReadFlag, ReaderPollWritten)
    ReaderBlock          the re-check failed: futex wait while sleep[k] == 1
    ReaderEndSleep       sleep[k] = 0 (also when the re-check succeeded); poll again

The sleep is the classic Dekker pair: the reader stores its word then loads the
flags, the writer stores ``written`` then loads the words, each with a full
fence between (FS1, FS2). So either the reader's re-check sees the message or
the writer sees the word and wakes it; the futex blocks only while the word is
still 1, so a wake between the re-check and the block is not lost (TLC:
``NoLostWakeupInv``, ``EveryMessageReadProp`` with no timeout action). An exception
in the wake-up wakes every reader (``spec/sleep/ReaderWake.tla``): those steps, and the
cut of one reader's block, are :mod:`.cursor_base`'s (``wake_all``, ``cut_sleep``).

The reader loads its own flag before ``written``: in the other order a stale
``written == 1`` from the chunk's previous lap, then a flag just cleared by
the writer, lets a reader consume a chunk before ``WriterPublish`` (TLC:
``PublishedBeforeReadInv``). The writer's read-flag loads are safe one at a
time because a read flag only goes 0 -> 1 while the writer waits. The invariants
TLC checks for these steps, with models and bounds: ``spec/ring/README.md``.
"""

from __future__ import annotations

from collections.abc import Callable

from .cursor_base import ReaderSide, RingViews, WriterSide
from .layout import WRITTEN_POSITION
from .leases import ReadLease, WriteLease
from .ordering import fence
from .pace import Pace
from .steps import (
    READER_ANNOUNCE_SLEEP,
    READER_BLOCK,
    READER_END_SLEEP,
    READER_POLL_READ_FLAG,
    READER_POLL_WRITTEN,
    READER_READ_PAYLOAD,
    READER_RELEASE,
    WRITER_ABORT,
    WRITER_ACTOR,
    WRITER_CHECK_SLEEP,
    WRITER_CLEAR_READ_FLAG,
    WRITER_CLEAR_SLEEP,
    WRITER_CLEAR_WRITTEN,
    WRITER_FILL_PAYLOAD,
    WRITER_POLL_READ_FLAG,
    WRITER_POLL_WRITTEN,
    WRITER_PUBLISH,
    WRITER_WAKE,
    StepObserver,
    reader_actor,
)
from .waiting import (
    MAX_BLOCK,
    MAX_IDLE_BLOCK,
    SLEEP_KIND,
    SPIN_SECONDS,
    Deadline,
    Sleeper,
    futex_wait,
    futex_wake,
    wait_for,
)

__all__ = ["ReaderCursor", "WriterCursor"]


class WriterCursor(WriterSide):
    """The single writer of a ring. Use ``with w.acquire_write() as buf:``."""

    actor = WRITER_ACTOR

    def acquire_write(self, timeout: float | None = None) -> WriteLease:
        """Wait until the next chunk is free (:class:`RingTimeoutError` after ``timeout``
        seconds); ``with`` it to fill it: a normal exit publishes it to every reader,
        a raising body leaves it unpublished (the next write reuses it). The whole chunk's
        pages are reserved first (no room: :class:`SharedMemoryFullError`, no store)."""
        return WriteLease(self.claim(Deadline.after(timeout)))

    def claim(
        self, deadline: Deadline, watch: Callable[[], None] | None = None,
        nbytes: int | None = None,
    ) -> WriterCursor:
        """:meth:`acquire_write` with the caller's :class:`Deadline`; ``watch`` is
        called while it waits (it raises to end the wait: a reader has died). The fill
        stores only into the chunk's first ``nbytes`` (default: all): their pages are
        reserved before the first poll, so :class:`SharedMemoryFullError` takes no step."""
        if self._closed or self._holding:
            self._refuse()
        need = self._chunk_bytes if nbytes is None else nbytes
        if need > self._marks[self.index]:
            self._reserve(self.index, need)
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

    def fill(self) -> memoryview:
        """The claimed chunk, to fill: then :meth:`publish` it or :meth:`abort` (``with``
        does both: it publishes on a normal exit, aborts when the body raised)."""
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
        self.holds += 1  # before the hold: an interrupt between them leaves nothing held
        self._holding = True
        return self._data[i]

    def abort(self, action: str = WRITER_ABORT) -> None:
        """Leave the filled chunk unpublished: the next write reuses it (``action``: the
        step that let it go, WriterExitCut from a lease whose exit never ran)."""
        i = self.index
        obs = self.observer
        self._holding = False
        if obs is not None:
            obs.after_step(WRITER_ACTOR, WRITER_FILL_PAYLOAD, i, None)
            # spec: WriterAbort -- no flag store; written[i] stays 0, index stays i. An
            # asynchronous exception raised at FW3/FW4 or between the flag clears of
            # publish() leaves the same way (RingBuffer.tla: WriterAbort in flags/publish).
            obs.before_step(WRITER_ACTOR, action, i, None)
            obs.after_step(WRITER_ACTOR, action, i, None)

    def publish(self) -> None:
        """Publish the filled chunk to every reader, then wake the sleeping ones (all of
        them, if the wake-up raises). Interrupted at its start, the chunk stays held."""
        i = self.index
        obs = self.observer
        self._holding = False
        if obs is not None:
            obs.after_step(WRITER_ACTOR, WRITER_FILL_PAYLOAD, i, None)
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
        try:  # no call between the store and here: CPython delivers no exception there
            if obs is not None:
                obs.after_step(WRITER_ACTOR, WRITER_PUBLISH, i, None)
            self.wake_sleepers(i)
        except BaseException:
            # spec: WriterInterruptedInWake -- e.g. a signal: no reader sleeps on with it out
            self.wake_all()
            raise

    def wake_sleepers(self, chunk: int) -> None:
        """Right after WriterPublish of ``chunk``: wake every reader whose sleep word is 1.
        While no reader sleeps this costs one fence and one compare."""
        fence()  # FS2: WriterPublish's store before the sleep-word loads (store -> load)
        obs = self.observer
        # spec: WriterCheckSleep (one copy of every word: a snapshot, see ReaderSleep.tla)
        if obs is not None:
            obs.before_step(WRITER_ACTOR, WRITER_CHECK_SLEEP, chunk, None)
        seen = self._sleep_view.tobytes()
        if obs is not None:
            obs.after_step(WRITER_ACTOR, WRITER_CHECK_SLEEP, chunk, None)
        if seen != self._none_asleep:
            self._wake(seen, chunk)

    def _wake(self, seen: bytes, chunk: int) -> None:
        words = self._sleep_words
        obs = self.observer
        for r, word in enumerate(memoryview(seen).cast("I")[: self._n_reader]):
            if not word:
                continue
            # spec: WriterClearSleep (one store per reader seen asleep, in order)
            if obs is not None:
                obs.before_step(WRITER_ACTOR, WRITER_CLEAR_SLEEP, chunk, r)
            words[r] = 0
            if obs is not None:
                obs.after_step(WRITER_ACTOR, WRITER_CLEAR_SLEEP, chunk, r)
                # spec: WriterWake -- FUTEX_WAKE orders the clear before it looks for
                # waiters (the kernel's barrier), so a reader not yet blocked sees 0
                obs.before_step(WRITER_ACTOR, WRITER_WAKE, chunk, r)
            futex_wake(self._sleep_addresses[r])
            if obs is not None:
                obs.after_step(WRITER_ACTOR, WRITER_WAKE, chunk, r)


class ReaderCursor(ReaderSide):
    """Local reader ``reader`` of a ring. Use ``with r.acquire_read() as buf:``."""

    #: The longest a wait's first block lasts, and the longest a later one lasts (each
    #: at most twice the one before); an instance may set its own.
    max_block: float = MAX_BLOCK
    max_idle_block: float = MAX_IDLE_BLOCK

    def __init__(
        self,
        views: RingViews,
        reader: int,
        observer: StepObserver | None,
        log_interval: float,
        wake_on_publish: bool = True,
    ) -> None:
        super().__init__(views, observer, log_interval)
        self.reader = reader
        self.actor = reader_actor(reader)
        self._own = views.layout.read_flag_position(reader)
        #: How long a wait spins (:attr:`spin_seconds`; ``pace.longest`` the most).
        self.pace = Pace(SPIN_SECONDS)
        #: What this reader's waits block in (pass it to ``wait_for``): itself, where
        #: the futex is available and ``wake_on_publish``; else ``None`` (doubling sleep).
        futex = wake_on_publish and SLEEP_KIND == "futex"
        self.sleeper: Sleeper | None = self if futex else None
        self._address = views.sleep_addresses[reader] if self.sleeper is not None else 0

    @property
    def spin_seconds(self) -> float:
        """The spin of the wait that begins now (:class:`~verifiedring.pace.Pace`)."""
        return self.pace.spin()

    def acquire_read(self, timeout: float | None = None) -> ReadLease:
        """Wait for the next published chunk (:class:`RingTimeoutError` after ``timeout``
        seconds); ``with`` it to read it (read-only by contract): leaving releases
        it, also when the body raises, so the writer never stalls on it."""
        return ReadLease(self.claim(Deadline.after(timeout)))

    def claim(self, deadline: Deadline) -> ReaderCursor:
        """:meth:`acquire_read` with the caller's :class:`Deadline`."""
        if self._closed or self._holding:
            self._refuse()
        if not self.poll():
            wait_for(self.poll, deadline, self._stall_log, self._timed_out, None, self.sleeper)
        return self

    def sleep(self, poll: Callable[[], bool], timeout: float) -> bool:
        """:class:`~verifiedring.waiting.Sleeper`: announce, re-check with ``poll`` (this
        cursor's :meth:`poll`, or a caller's poll that calls it), and unless it is true
        block until the writer's WriterWake or ``timeout``; the re-check's result."""
        i = self.index
        obs = self.observer
        actor = self.actor
        words = self._sleep_words
        k = self.reader
        # spec: ReaderAnnounceSleep
        if obs is not None:
            obs.before_step(actor, READER_ANNOUNCE_SLEEP, i, None)
        words[k] = 1
        fence()  # FS1: the sleep word's store before the re-check's loads (store -> load)
        if obs is not None:
            obs.after_step(actor, READER_ANNOUNCE_SLEEP, i, None)
        ready = False
        try:
            ready = poll()
            if not ready:
                # spec: ReaderBlock -- the kernel blocks only while the word is still 1
                if obs is not None:
                    obs.before_step(actor, READER_BLOCK, i, None)
                self.pace.block(futex_wait, self._address, timeout)  # early for a rhythm
                if obs is not None:
                    obs.after_step(actor, READER_BLOCK, i, None)
        finally:
            # spec: ReaderEndSleep -- also when the re-check or the wait raised
            if obs is not None:
                obs.before_step(actor, READER_END_SLEEP, i, None)
            words[k] = 0
            if obs is not None:
                obs.after_step(actor, READER_END_SLEEP, i, None)
        return ready or self.pace.after_sleep(poll, timeout)  # polls: no step

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

    def take(self) -> memoryview:
        """The polled chunk, to read (read-only by contract); then :meth:`release` it
        (``with`` releases it on exit, also when the body raised)."""
        if self._closed or self._holding:
            self._refuse()
        if self.observer is not None:
            # spec: ReaderReadPayload (the caller's with-body)
            self.observer.before_step(self.actor, READER_READ_PAYLOAD, self.index, None)
        self.holds += 1  # before the hold, as in fill()
        self._holding = True
        return self._data[self.index]

    def release(self, action: str = READER_RELEASE) -> None:
        """Mark the taken chunk read by this reader: the writer may reuse it (``action``:
        the step that stores, ReaderExitCut from a lease whose exit never ran)."""
        i = self.index
        obs = self.observer
        self._holding = False
        if obs is not None:
            obs.after_step(self.actor, READER_READ_PAYLOAD, i, None)
        try:
            fence()  # FR2: payload loads before the release store
        finally:
            # spec: ReaderRelease -- also when the body raised, and when an asynchronous
            # exception (KeyboardInterrupt) is delivered at the fence call's return; no
            # call stands between the store and the index update: nothing lands there.
            if obs is not None:
                obs.before_step(self.actor, action, i, None)
            self._flags[i][self._own] = 1
            self.index = (i + 1) % self._max_chunks
            if obs is not None:
                obs.after_step(self.actor, action, i, None)
