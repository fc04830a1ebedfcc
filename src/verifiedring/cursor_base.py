"""What the ring's two cursors share, beneath the protocol steps of :mod:`.cursors`.

:class:`RingViews`, the views of one mapped segment that the ring hands its
cursors; the index and hold state of one side; what each side says about a wait
(its stall text, its timeout). The one-message steps of ``spec/ring/RingBuffer.tla``
and ``spec/sleep/ReaderSleep.tla`` are :mod:`.cursors`'s; the wake-every-reader steps
of ``spec/sleep/ReaderWake.tla`` are here, beside the state they clear:
:meth:`WriterSide.wake_all` (WriterWakeAllClear, WriterWakeAllWake, after a
SHUTDOWN, a BROKEN or a wake-up that raised) and :meth:`ReaderSide.cut_sleep`
(CutterSetStop, CutterClearSleep, CutterWake).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ClosedError, MisuseError, RingTimeoutError
from .layout import SLEEP_WORD_SIZE, WRITTEN_POSITION, RingLayout
from .steps import StepObserver
from .waiting import SLEEP_KIND, Sleeper, StallLog, buffer_address, futex_wake

if TYPE_CHECKING:
    from .reservation import PageReserver


@dataclass(frozen=True)
class RingViews:
    """The views of one mapped ring segment, made once by its :class:`ShmRingBuffer`
    and handed to each cursor it makes: the hot path only indexes these lists."""

    name: str  # the segment's name
    layout: RingLayout
    data: list[memoryview]  # chunk c's data bytes
    flags: list[memoryview]  # chunk c's flag block: written, then a read flag per reader
    sleep_view: memoryview  # every sleep word's bytes: the writer's one copy and compare
    #: Every sleep word as native 32-bit words, one per reader, then the ended word.
    sleep_words: memoryview
    #: Each reader's sleep word as an address, for the futex (empty without one).
    sleep_addresses: tuple[int, ...]

    @classmethod
    def over(cls, buf: memoryview, layout: RingLayout, name: str) -> RingViews:
        """The views of the segment ``name`` mapped at ``buf``, laid out by ``layout``."""
        size, per_chunk = layout.max_chunk_bytes, layout.flags_per_chunk
        words = [layout.sleep_offset(r) for r in range(layout.n_reader)]
        sleep = buf[words[0] : words[-1] + SLEEP_WORD_SIZE]
        words_and_ended = buf[words[0] : layout.ended_offset + SLEEP_WORD_SIZE]
        return cls(
            name, layout,
            [buf[o : o + size] for o in map(layout.data_offset, range(layout.max_chunks))],
            [buf[o : o + per_chunk] for o in map(layout.flags_offset, range(layout.max_chunks))],
            sleep, words_and_ended.cast("I"),
            tuple(buffer_address(buf[o : o + SLEEP_WORD_SIZE]) for o in words)
            if SLEEP_KIND == "futex" else (),
        )

    def release(self) -> None:
        """Release every view (the segment can be unmapped once no other is held)."""
        for view in (*self.data, *self.flags, self.sleep_words, self.sleep_view):
            view.release()


class Cursor:
    """State shared by both cursor kinds: views, index, hold state."""

    actor: str

    def __init__(
        self, views: RingViews, observer: StepObserver | None, log_interval: float
    ) -> None:
        self._name = views.name
        self.layout = views.layout  # the ring's geometry
        self._n_reader = views.layout.n_reader
        self._max_chunks = views.layout.max_chunks
        self._data = views.data
        self._flags = views.flags
        #: One 32-bit word per reader, then the ended word (layout.py).
        self._sleep_words = views.sleep_words
        self.observer = observer
        self.log_interval = log_interval
        # Invariant: the next chunk this side will use, 0..max_chunks-1; private to it.
        self.index = 0
        # Invariant: true from fill()/take() until publish()/abort()/release().
        self._holding = False
        #: How many times fill()/take() has held a chunk (a lease knows its own hold).
        self.holds = 0
        self._closed = False  # set when the ring closes (it detaches every cursor)

    @property
    def holding(self) -> bool:
        """A chunk is taken or being filled and not yet left."""
        return self._holding

    def __repr__(self) -> str:
        state = "closed" if self._closed else "holding" if self._holding else "idle"
        kind = type(self).__name__
        return f"<{kind} {self.actor} of ring {self._name!r} chunk {self.index} {state}>"

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

    def detach(self) -> None:
        """The ring is closing: every acquire from now on raises :class:`ClosedError`."""
        self._closed = True


class WriterSide(Cursor):
    """The writer cursor's state (its flag positions, the sleep words, its page
    reservation) and what it says about its waits."""

    #: What messages call each reader (by index), e.g. its rank, pid and host and
    #: whether it lives: ``str()`` of each, taken when a message is written.
    reader_names: list[object] | None = None
    #: When each chunk was last published (monotonic seconds; 0: never), where its user
    #: keeps them (the queue's ``LocalTransmitter``): a stall line says how long ago the
    #: chunk a reader has not read was published.
    published_at: list[float] | None = None

    def settle(self, i: int) -> bool:
        """After :meth:`publish` of chunk ``i`` raised: whether its WriterPublish store
        happened. If so, the rest is done now: the index moves past ``i``, every
        reader's word is cleared and it is woken (one whose word was cleared, not
        woken, would stay blocked). If not, the next claim takes chunk ``i``."""
        if not self._flags[i][WRITTEN_POSITION]:
            return False
        self.index = (i + 1) % self._max_chunks
        self.wake_all()
        return True

    def mark_ended(self) -> None:
        """The writer has sent its last frame (SHUTDOWN or BROKEN) on the local socket
        and publishes nothing more: from now on a reader's re-check that finds nothing
        on the ring waits on its socket for that frame (which may still be in flight)
        instead of blocking on its sleep word. Call it before :meth:`wake_all`."""
        # spec: WriterMarkEnded -- after the frame's send, before wake_all's clears
        self._sleep_words[self._n_reader] = 1

    def wake_all(self) -> None:
        """For each reader in order, clear its sleep word, then wake it: a blocked
        reader runs and re-checks, a wait about to block returns (``spec/sleep/ReaderWake.tla``:
        after SHUTDOWN or BROKEN is sent and the ended word stored, and when the wake-up
        after a publish raised)."""
        words = self._sleep_words
        for r, address in enumerate(self._sleep_addresses):
            # spec: WriterWakeAllClear -- before the wake, as WriterClearSleep
            words[r] = 0
            # spec: WriterWakeAllWake
            futex_wake(address)

    def __init__(
        self, views: RingViews, pages: PageReserver, observer: StepObserver | None,
        log_interval: float,
    ) -> None:
        super().__init__(views, observer, log_interval)
        #: (reader index, its flag's position in a chunk's flag block), in reader order.
        self._positions = tuple(
            (r, views.layout.read_flag_position(r)) for r in range(self._n_reader)
        )
        self._sleep_view = views.sleep_view
        self._none_asleep = bytes(len(views.sleep_view))
        self._sleep_addresses = views.sleep_addresses
        # The page reservation (.reservation): the reserver's own list of marks, so a
        # write within its chunk's mark costs one compare.
        self._marks = pages.marks
        self._reserve = pages.reserve
        self._chunk_bytes = views.layout.max_chunk_bytes

    def unread_by(self) -> list[int]:
        """Local reader indices that have not read the writer's current chunk."""
        flags = self._flags[self.index]
        return [r for r, pos in self._positions if flags[pos] == 0]

    def _unread(self) -> str:
        unread = self.unread_by()
        names = self.reader_names
        who = "" if names is None else " (" + "; ".join(str(names[r]) for r in unread) + ")"
        at = self.published_at
        when = 0.0 if at is None else at[self.index]
        ago = f", published {time.monotonic() - when:.1f} s ago" if when else ""
        return f"readers {unread}{who} have not read it{ago}"

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


class ReaderSide(Cursor):
    """What a reader cursor says about its waits."""

    #: What this reader's waits block in (``None``: a doubling sleep); see :meth:`use_sleeper`.
    sleeper: Sleeper | None
    reader: int
    _own: int  # its read flag's position in a chunk's flag block
    _address: int  # its sleep word's address (0: it never blocks on the futex)

    def held(self) -> memoryview:
        """The chunk this reader took and has not released (an interrupt cut the taker
        short); :class:`MisuseError` if it holds none."""
        if not self._holding:
            raise MisuseError(f"{self.actor} of ring {self._name!r} holds no chunk")
        return self._data[self.index]

    def use_sleeper(self, sleeper: Sleeper) -> None:
        """The plug point of this reader's waits: from its next wait on, each one that
        outlasts its spin calls ``sleeper`` (:class:`~verifiedring.waiting.Sleeper`: its
        ``spin_seconds``, ``max_block``, ``max_idle_block`` and ``sleep(poll, timeout)``)
        instead of the cursor's own futex sleep (an engine's wait knobs, e.g.
        :class:`verifiedring.compat.spin.SpinCondition`). Call it from the reader's thread,
        between waits."""
        self.sleeper = sleeper

    def see_ended(self) -> bool:
        """In the re-check before a block: whether the writer has ended (its last frame
        is sent, maybe still in flight). If it has, this reader's own sleep word is
        cleared, so the block that follows returns at once: the caller waits on its
        socket for the frame instead (``spec/sleep/ReaderWake.tla``)."""
        # spec: ReaderSeeEnded -- after the announce and FS1, as the re-check's loads
        if not self._sleep_words[self._n_reader]:
            return False
        if self._address:
            self._sleep_words[self.reader] = 0
        return True

    def cut_sleep(self, stop: Callable[[], None] | None = None) -> None:
        """End this reader's block now, from another thread (``shutdown()``, the writer
        watch, vLLM's ``cancel``): first ``stop()`` stores what the woken reader is to
        see, then the word is cleared, then it is woken (``spec/sleep/ReaderWake.tla``). The
        reader re-checks as after a timeout and sees what ``stop`` stored; the clear
        before the wake makes a cut landing between the re-check and the block end it
        too (the futex waits only while the word is 1). A signal at ``stop``'s return
        still lets the clear and the wake run before it leaves."""
        try:
            # spec: CutterSetStop
            if stop is not None:
                stop()
        finally:
            if self._address:
                # spec: CutterClearSleep
                self._sleep_words[self.reader] = 0
                # spec: CutterWake
                futex_wake(self._address)

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
