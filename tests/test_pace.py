"""A reader's spin follows its recent waits (``verifiedring.pace``): a step every few
milliseconds sleeps at once, a burst spins, and a steady rhythm ends the block just
before the next step is due to spin for it. Spinning is polling: no step changes."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from verifiedring import ShmRingBuffer
from verifiedring import pace as pace_module
from verifiedring.pace import LATE_WAITS, LATENESS_DECAY, LEAD, MAX_LATENESS, RHYTHM, Pace
from verifiedring.steps import (
    READER_ANNOUNCE_SLEEP,
    READER_BLOCK,
    READER_END_SLEEP,
    READER_POLL_READ_FLAG,
    READER_POLL_WRITTEN,
    READER_RELEASE,
)
from verifiedring.testing import wait_blocked
from verifiedring.waiting import SLEEP_KIND, SPIN_SECONDS

LONGEST = 1e-3
LATE = 5e-3  # a block after which the message came later than LONGEST
SHORT = 1e-4  # a block that ended within LONGEST of its wait's start
HOLD = 10.0


def _late_waits(pace: Pace, n: int) -> list[float]:
    """``n`` waits, each blocking until after ``LONGEST``: the spin each began with."""
    spins = []
    for _ in range(n):
        spins.append(pace.spin())
        pace.blocked(LATE)
    return spins


def test_a_fresh_pace_spins_the_longest() -> None:
    assert Pace(LONGEST).spin() == LONGEST


def test_after_three_late_waits_in_a_row_the_next_waits_sleep_at_once() -> None:
    pace = Pace(LONGEST)
    assert LATE_WAITS == 3
    assert _late_waits(pace, 5) == [LONGEST, LONGEST, LONGEST, 0.0, 0.0]


def test_a_wait_that_sleeps_at_once_and_is_woken_within_the_longest_spins_again() -> None:
    pace = Pace(LONGEST)
    _late_waits(pace, 3)
    assert pace.spin() == 0.0
    pace.blocked(SHORT)  # a burst: the message came within LONGEST of the wait's start
    assert pace.spin() == LONGEST


def test_a_wait_that_ended_in_its_spin_starts_the_count_again() -> None:
    pace = Pace(LONGEST)
    _late_waits(pace, 2)
    pace.spin()  # this wait's spin found the message: no block
    assert _late_waits(pace, 3) == [LONGEST, LONGEST, LONGEST]
    assert pace.spin() == 0.0


def test_a_recheck_that_found_the_message_is_not_late() -> None:
    pace = Pace(LONGEST)
    _late_waits(pace, 2)
    pace.spin()
    pace.blocked(None)  # the re-check after the announcement found it: no block
    assert _late_waits(pace, 3) == [LONGEST, LONGEST, LONGEST]


def test_any_block_after_a_whole_spin_is_late_however_short() -> None:
    pace = Pace(LONGEST)
    for _ in range(3):
        pace.spin()
        pace.blocked(SHORT)  # the spin ran out first: the message came after LONGEST
    assert pace.spin() == 0.0


def test_an_endless_spin_and_no_spin_are_kept() -> None:
    never = Pace(math.inf)
    assert _late_waits(never, 5) == [math.inf] * 5
    at_once = Pace(0.0)
    at_once.blocked(SHORT)
    assert at_once.spin() == 0.0


@pytest.fixture
def ring() -> Iterator[ShmRingBuffer]:
    ring = ShmRingBuffer(1, 64, 2)
    yield ring
    ring.close()


class _Actions:
    def __init__(self) -> None:
        self.actions: list[str] = []

    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        self.actions.append(action)

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        pass


@pytest.mark.skipif(SLEEP_KIND != "futex", reason="no futex here")
def test_a_ring_reader_woken_from_each_block_stops_spinning_after_three(
    ring: ShmRingBuffer,
) -> None:
    """Five messages, each published once the reader is observably blocked: the first
    three waits spin (many polls before the announcement), the last two announce their
    sleep right after claim()'s one failed poll."""
    readers_ring = ShmRingBuffer.attach(ring.handle())
    seen = _Actions()
    r = readers_ring.reader(0, observer=seen)
    w = ring.writer()
    assert r.pace.longest == SPIN_SECONDS
    got: list[bytes] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(5):
                with r.acquire_read(HOLD) as buf:
                    got.append(bytes(buf[:1]))
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        for i in range(5):
            wait_blocked(t, HOLD)
            with w.acquire_write(HOLD) as buf:
                buf[:1] = bytes([i])
        t.join(HOLD)
        assert not t.is_alive() and errors == []
        assert got == [bytes([i]) for i in range(5)]
        # each wait: the polls from the last release (or the start) to the announcement
        waits, polls = [], 0
        for action in seen.actions:
            if action in (READER_POLL_READ_FLAG, READER_POLL_WRITTEN):
                polls += 1
            elif action == READER_ANNOUNCE_SLEEP:
                waits.append(polls)
            if action in (READER_ANNOUNCE_SLEEP, READER_RELEASE):
                polls = 0
        assert len(waits) == 5
        assert all(n > 1 for n in waits[:3]), waits  # spun: a batch of polls at least
        # claim()'s one failed poll only (its own flag still set), then asleep at once
        assert waits[3:] == [1, 1]
    finally:
        readers_ring.close()


def _rhythm(pace: Pace, period: float, last: float) -> None:
    """``RHYTHM + 1`` arrivals ``period`` apart, the last at ``last``."""
    for k in range(RHYTHM, -1, -1):
        pace.arrived(last - k * period)


def test_without_enough_arrivals_there_is_no_window() -> None:
    pace = Pace(LONGEST)
    for k in range(RHYTHM):
        pace.arrived(k * 0.01)
    assert pace.window(RHYTHM * 0.01) is None


def test_a_steady_rhythm_ends_the_block_lead_before_the_next_step() -> None:
    pace = Pace(LONGEST)
    _rhythm(pace, 0.01, 100.0)
    assert pace.window(100.001) == pytest.approx(0.01 - LEAD - 0.001)
    assert pace.window(100.01 - LEAD) is None  # that moment has passed
    assert pace.window(100.001, 0.005) is None  # the block's bound ends it first


def test_arrivals_spread_by_more_than_half_their_median_gap_have_no_rhythm() -> None:
    pace = Pace(LONGEST)
    for t in (0.0, 0.002, 0.012, 0.015, 0.027):  # gaps 2, 10, 3, 12 ms: median 10
        pace.arrived(t)
    assert pace.window(0.028) is None


def test_a_rhythm_too_fast_to_sleep_through_has_no_window() -> None:
    pace = Pace(LONGEST)
    _rhythm(pace, 3 * LEAD, 1.0)
    assert pace.window(1.0) is None


def test_a_block_woken_well_before_its_bound_is_an_arrival_a_timed_out_one_is_not() -> None:
    pace = Pace(LONGEST)
    for _ in range(RHYTHM + 1):
        pace.spin()
        assert pace.blocked(0.95, None, 1.0) is False  # timed out: no arrival
    assert pace.window(time.monotonic()) is None
    start = time.monotonic()
    for _ in range(RHYTHM + 1):
        pace.spin()
        assert pace.blocked(0.001, None, 1.0) is False  # woken: an arrival, now
    assert pace.window(start) is None  # arrivals microseconds apart: too fast


class _Clock:
    """A stand-in for the pace's clock (a futex wait of :func:`_blocked_for` moves it)."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _blocked_for(clock: _Clock, lasted: float) -> Callable[[int, int, float], None]:
    def futex_wait(address: int, expected: int, timeout: float) -> None:
        clock.now += lasted

    return futex_wait


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    """The pace's clock, stood in for (at 0 until a test sets it)."""
    stand_in = _Clock(0.0)
    monkeypatch.setattr(pace_module, "_monotonic", stand_in)
    return stand_in


def test_a_timeout_that_ends_the_block_late_ends_the_next_block_that_much_earlier(
    clock: _Clock,
) -> None:
    pace = Pace(LONGEST)
    period, late = 0.01, 300e-6
    _rhythm(pace, period, 100.0)
    clock.now = 100.001
    early = pace.window(clock.now)
    assert early is not None and early == pytest.approx(period - LEAD - 0.001)
    pace.block(_blocked_for(clock, early + late), 0, 1.0)  # its timeout came 0.3 ms late
    assert pace.lateness == pytest.approx(late)
    _rhythm(pace, period, 100.01)
    clock.now = 100.011
    assert pace.window(clock.now) == pytest.approx(period - LEAD - late - 0.001)
    pace.block(_blocked_for(clock, 0.002), 0, 1.0)  # woken before its early end: kept
    assert pace.lateness == pytest.approx(late)


def test_the_kept_lateness_decays_and_is_bounded(clock: _Clock) -> None:
    pace = Pace(LONGEST)
    _rhythm(pace, 0.01, 0.0)
    clock.now = 0.001
    early = pace.window(clock.now)
    assert early is not None
    pace.block(_blocked_for(clock, early + 1.0), 0, 10.0)  # a second late: bounded
    assert pace.lateness == MAX_LATENESS
    _rhythm(pace, 0.01, clock.now)
    clock.now += 0.001
    assert pace.window(clock.now) == pytest.approx(0.01 - LEAD - MAX_LATENESS - 0.001)
    _rhythm(pace, 0.002, clock.now)  # a faster rhythm: at most a quarter of its period
    clock.now += 0.0001
    early = pace.window(clock.now)
    assert early is not None and early == pytest.approx(0.002 - LEAD - 0.002 / 4 - 0.0001)
    pace.block(_blocked_for(clock, early), 0, 10.0)  # on time: the kept one decays
    assert pace.lateness == pytest.approx(MAX_LATENESS * LATENESS_DECAY)


def test_a_woken_reader_s_arrival_is_stamped_at_the_futex_return(clock: _Clock) -> None:
    """Not after the reader's path back from it: the rhythm is the writer's."""
    clock.now = 50.0
    pace = Pace(LONGEST)
    pace.spin()
    pace.block(_blocked_for(clock, 0.004), 0, 1.0)
    woke = clock.now
    clock.now += 0.0005  # the reader's own path after the wake
    assert pace.after_sleep(lambda: True, 1.0) is False  # no window: no polls
    assert pace._arrivals == [woke]


def test_a_reader_woken_before_its_window_s_end_polls_once(clock: _Clock) -> None:
    pace = Pace(LONGEST)
    _rhythm(pace, 0.01, 100.0)
    clock.now = 100.001
    pace.spin()
    pace.block(_blocked_for(clock, 0.002), 0, 1.0)  # woken 0.002 s in: before its end
    polls: list[int] = []

    def poll() -> bool:
        polls.append(1)
        return False

    assert pace.after_sleep(poll, 1.0) is False
    assert polls == [1]  # one look: a cut, not the message


def test_a_block_ended_early_for_the_rhythm_asks_for_a_spin() -> None:
    pace = Pace(LONGEST)
    pace.spin()
    assert pace.blocked(0.008, 0.008, 1.0) is True
    assert pace.blocked(None, None, 1.0) is False  # the re-check found it: no block


@pytest.mark.skipif(SLEEP_KIND != "futex", reason="no futex here")
def test_a_reader_with_a_rhythm_ends_its_block_early_and_then_only_polls(
    ring: ShmRingBuffer,
) -> None:
    """No message comes: the block ends at the rhythm's window (long before its bound),
    then the reader polls for twice LEAD after ReaderEndSleep; no other step."""
    readers_ring = ShmRingBuffer.attach(ring.handle())
    seen = _Actions()
    r = readers_ring.reader(0, observer=seen)
    try:
        period = 0.02
        _rhythm(r.pace, period, time.monotonic())
        began = time.monotonic()
        assert r.sleep(r.poll, HOLD) is False
        assert time.monotonic() - began < HOLD / 2  # the window ended it, not the bound
        poll = [READER_POLL_READ_FLAG, READER_POLL_WRITTEN]  # a fresh ring: nothing written
        assert seen.actions[:5] == [READER_ANNOUNCE_SLEEP, *poll, READER_BLOCK,
                                    READER_END_SLEEP]
        spin = seen.actions[5:]
        assert spin and spin == poll * (len(spin) // 2)
    finally:
        readers_ring.close()
