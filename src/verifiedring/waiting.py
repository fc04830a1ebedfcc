"""The one waiting vocabulary: a deadline, a stall log, and two ways to wait.

* :class:`Deadline` is made once from the caller's ``timeout`` (validated here,
  and only here) and passed down unchanged to every wait of that call.
* :class:`StallLog` logs one warning per interval while a wait lasts, naming
  who waits for what and for how long (the real elapsed time of the call).
* :func:`wait_for` waits on shared memory: it polls a condition, yielding the
  CPU between polls for the first ``SPIN_SECONDS`` (hand-off latency stays in
  the microseconds while the peer runs; a ring reader's spin follows its recent
  waits, :class:`~verifiedring.pace.Pace`), then,
  given a :class:`Sleeper` (a ring reader, where ``SLEEP_KIND == "futex"``),
  blocks in the sleeper until the peer wakes it (at once) or the block's bound
  passes: ``MAX_BLOCK`` first, each block twice the last up to the sleeper's
  ``max_idle_block`` (``MAX_IDLE_BLOCK`` by default; a local reader whose writer
  watch runs: ``WATCHED_IDLE_BLOCK``), else sleeps, doubling from ``FIRST_SLEEP``
  up to ``MAX_SLEEP`` (about 1,000 wake-ups a second).
* :func:`wait_readable` waits on something with a blocking, bounded poll (a
  socket): it blocks at most until the deadline or the next stall log.

Both raise ``on_timeout(elapsed_seconds)`` when the deadline passes, and both
are called after a poll that failed: ``timeout=0`` polls exactly once. Both
take an optional ``watch``, called every ``WATCH_INTERVAL`` seconds of the wait
(also with no deadline): it raises to end the wait, e.g. when the peer waited
for has died, so a dead peer is named, not waited out.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import time
from collections.abc import Callable
from typing import NoReturn, Protocol

from .errors import MisuseError

try:  # Linux, with the C extension: a futex on a word of the shared segment
    from ._fence import buffer_address, futex_wait, futex_wake

    SLEEP_KIND = "futex"
except ImportError:  # elsewhere: readers sleep, doubling, as writers do
    SLEEP_KIND = "doubling-sleep"

    # Never called: without them no reader has a sleeper, so no sleep word is ever 1.
    def _no_futex() -> NoReturn:
        raise MisuseError(f"no futex here (SLEEP_KIND {SLEEP_KIND!r})")

    def buffer_address(buffer: memoryview) -> int:
        _no_futex()

    def futex_wait(address: int, expected: int, timeout: float) -> None:
        _no_futex()

    def futex_wake(address: int) -> int:
        _no_futex()

SPIN_SECONDS = 1e-3
SPIN_BATCH = 16  # polls between clock reads while spinning
FIRST_SLEEP = 20e-6
MAX_SLEEP = 1e-3
DEFAULT_LOG_INTERVAL = 10.0
WATCH_INTERVAL = 0.1
#: The longest a sleeper's first block lasts: the poll (which may watch a socket) runs
#: again. Each later block of the same wait may last twice the one before, up to
#: ``MAX_IDLE_BLOCK``: what a poll looks for besides the ring (a writer gone, a frame
#: on a socket) is seen within 0.1 s of a busy spell and within a second of a long idle
#: (a local reader with a writer watch is woken for those instead: see queue/writer_watch).
MAX_BLOCK = WATCH_INTERVAL
MAX_IDLE_BLOCK = 1.0

__all__ = [
    "FOREVER",
    "MAX_BLOCK",
    "MAX_IDLE_BLOCK",
    "SLEEP_KIND",
    "Deadline",
    "Sleeper",
    "StallLog",
    "block_seconds",
    "buffer_address",
    "futex_wait",
    "futex_wake",
    "to_ms",
    "wait_for",
    "wait_readable",
]

logger = logging.getLogger("verifiedring")

_monotonic = time.monotonic


class Deadline:
    """When a call's waits must end: ``at`` on the monotonic clock, or never (``None``).

    ``started`` is when the call began, so errors and logs report the real
    elapsed time of the call, not of one wait inside it.
    """

    __slots__ = ("at", "started")

    def __init__(self, at: float | None, started: float) -> None:
        self.at = at
        self.started = started

    @classmethod
    def after(cls, timeout: float | None) -> Deadline:
        """The deadline ``timeout`` seconds from now; ``None``, ``inf`` or a number
        beyond any float: never. Any real number is seconds (numpy's too).

        Raises :class:`MisuseError` naming the value for a negative, NaN, bool or
        non-numeric timeout.
        """
        if timeout is None:
            return FOREVER
        if type(timeout) is not float and type(timeout) is not int:
            timeout = _seconds(timeout)
        if not timeout >= 0:  # also catches NaN
            raise MisuseError(f"timeout must be None or >= 0 seconds, got {timeout!r}")
        now = _monotonic()
        try:
            at = now + timeout
        except OverflowError:  # an int beyond any float: no clock reaches it
            return cls(None, now)
        return cls(None if math.isinf(at) else at, now)

    def remaining(self) -> float | None:
        """Seconds left (never negative), or ``None`` for no deadline."""
        at = self.at
        return None if at is None else max(at - _monotonic(), 0.0)

    def elapsed(self) -> float:
        """Seconds since the call that made this deadline began."""
        return _monotonic() - self.started


def _seconds(timeout: object) -> float | int:
    """A timeout of another numeric type (numpy's, ``fractions``) as an int or float;
    a bool or a non-number is a :class:`MisuseError` naming the value."""
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise MisuseError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    return int(timeout) if isinstance(timeout, numbers.Integral) else float(timeout)


#: The deadline of ``timeout=None``: shared, so an untimed call allocates nothing.
FOREVER = Deadline(None, 0.0)


#: The stall line's format (the compat layer logs it at an engine's level).
STALL_MESSAGE = "pid %d still waiting after %.1f s: %s"


class StallLog:
    """Logs ``describe()`` at WARNING once per ``interval`` while a wait lasts."""

    __slots__ = ("_began", "_describe", "_interval", "_next")

    def __init__(self, describe: Callable[[], str], interval: float = DEFAULT_LOG_INTERVAL):
        self._describe = describe
        self._interval = interval
        self._began = _monotonic()
        self._next = self._began + interval

    def since(self, began: float) -> None:
        """Count the wait from ``began`` (its call's start): the first line is due one
        interval after it."""
        self._began = began
        self._next = began + self._interval

    def due(self, now: float) -> bool:
        """Whether a line is due at ``now`` (an interval has passed since the last one,
        or the start); if so, the next is due one interval later."""
        if now >= self._next:
            self._next = now + self._interval
            return True
        return False

    def tick(self, now: float) -> None:
        """Log if a line is due (:meth:`due`)."""
        if self.due(now):
            logger.warning(
                STALL_MESSAGE,
                os.getpid(), now - self._began, self._describe(),
            )

    def next_at(self) -> float:
        """When the next line is due."""
        return self._next


class Sleeper(Protocol):
    """What :func:`wait_for` blocks in once it has spun ``spin_seconds``."""

    @property
    def spin_seconds(self) -> float:
        """How long a wait spins before its first block."""
        ...

    @property
    def max_block(self) -> float:
        """The longest the first block of a wait lasts."""
        ...

    @property
    def max_idle_block(self) -> float:
        """The longest a later block lasts (each at most twice the one before); at most
        ``max_block`` if smaller."""
        ...

    def sleep(self, poll: Callable[[], bool], timeout: float) -> bool:
        """Announce the sleep, re-check with ``poll``, and unless it is true block
        until woken or ``timeout`` seconds pass; return the re-check's result."""
        ...


def _expired(deadline: Deadline, now: float) -> bool:
    return deadline.at is not None and now >= deadline.at


def _spin_batch(poll: Callable[[], bool]) -> bool:
    """``SPIN_BATCH`` polls, a CPU yield before each, no clock read: whether one succeeded."""
    yield_cpu = os.sched_yield
    for _ in range(SPIN_BATCH):
        yield_cpu()
        if poll():
            return True
    return False


def block_seconds(now: float, at: float | None, next_log: float, cap: float) -> float:
    """How long one block may last from ``now``: ``cap`` seconds, at most until the
    next stall line ``next_log`` and the deadline ``at`` (never negative). ``cap``
    binding is returned exactly, so a whole number of ms stays one (:func:`to_ms`)."""
    bound = min(cap, next_log - now)
    if at is not None:
        bound = min(bound, at - now)
    return max(bound, 0.0)


def to_ms(seconds: float) -> int:
    """``seconds`` as whole milliseconds, rounded up (a block ends at or after its
    bound), up to float noise: ``to_ms(0.007) == 7``."""
    return max(math.ceil(seconds * 1000 - 1e-6), 0)


class _BlockCaps:
    """The caps of one wait's blocks: ``max_block`` first, then each twice the last, up
    to ``max_idle_block``. A block that ended before half its bound with nothing ready
    (woken for something else than a message: ``shutdown()``, the writer's wake at its
    own shutdown or break) starts over at ``max_block``, so what woke it is looked at
    again soon (the frame it announces may still be on its way)."""

    __slots__ = ("_first", "_idle", "cap", "sleeper")

    def __init__(self, sleeper: Sleeper) -> None:
        self.sleeper = sleeper
        self._first = sleeper.max_block
        self._idle = max(self._first, sleeper.max_idle_block)
        self.cap = self._first

    def after(self, bound: float, lasted: float) -> None:
        """The block just ended, after ``lasted`` of its ``bound`` seconds, with nothing
        ready."""
        self.cap = self._first if lasted < bound / 2 else min(self.cap * 2, self._idle)


def _block(
    caps: _BlockCaps,
    poll: Callable[[], bool],
    recheck: Callable[[], bool],
    log: StallLog,
    now: float,
    at: float | None,
    next_watch: float | None,
) -> bool:
    """One block in ``caps.sleeper`` (``recheck`` its re-check), bounded by
    :func:`block_seconds` (the next stall log line, the cap, the deadline ``at``) and the
    next watch; then whether ``poll()`` is true."""
    cap = caps.cap
    if next_watch is not None:
        cap = min(cap, next_watch - now)
    bound = block_seconds(now, at, log.next_at(), cap)
    if caps.sleeper.sleep(recheck, bound) or poll():
        return True
    caps.after(bound, _monotonic() - now)
    return False


def _nap(poll: Callable[[], bool], sleep: float, now: float, at: float | None) -> bool:
    """Sleep ``sleep`` seconds (at most until the deadline ``at``), then poll once."""
    time.sleep(sleep if at is None else min(sleep, max(at - now, 0.0)))
    return poll()


def wait_for(
    poll: Callable[[], bool],
    deadline: Deadline,
    stall: Callable[[], StallLog],
    on_timeout: Callable[[float], Exception],
    watch: Callable[[], None] | None = None,
    sleeper: Sleeper | None = None,
    recheck: Callable[[], bool] | None = None,
) -> None:  # pragma: no mutate block (testing.blocked finds a wait by its code)
    """Return as soon as ``poll()`` is true; call it after a poll that failed.

    ``stall`` makes the stall log, and is called only once the wait outlasts
    its first spin (the common hand-off never builds one). With a ``sleeper``,
    the wait blocks in ``sleeper.sleep`` after its spin, each block bounded by
    the deadline, the next stall log line, the next watch and its cap
    (:class:`_BlockCaps`: ``max_block``, then doubling up to ``max_idle_block``);
    the re-check before each block is ``recheck()`` (default ``poll()``).
    """
    if _expired(deadline, _monotonic()):
        raise on_timeout(deadline.elapsed())
    spin = SPIN_SECONDS if sleeper is None else sleeper.spin_seconds
    if spin > 0 and _spin_batch(poll):  # most hand-offs end here, before any clock read
        return
    log = stall()
    if deadline.at is not None:
        log.since(deadline.started)  # the call's time counts, its spin included
    start = _monotonic()
    next_watch = start
    sleep = FIRST_SLEEP
    caps = None if sleeper is None else _BlockCaps(sleeper)
    while True:
        now = _monotonic()
        log.tick(now)  # first: a wait that outlasted an interval logs, also as it times out
        at = deadline.at
        if at is not None and now >= at:
            raise on_timeout(deadline.elapsed())
        if watch is not None and now >= next_watch:
            watch()
            next_watch = now + WATCH_INTERVAL
        if now - start < spin:
            done = _spin_batch(poll)  # no clock read between these polls
        elif caps is not None:
            done = _block(
                caps, poll, poll if recheck is None else recheck, log, now, at,
                next_watch if watch is not None else None,
            )
        else:
            done = _nap(poll, sleep, now, at)
            sleep = min(sleep * 2, MAX_SLEEP)
        if done:
            return


def wait_readable(
    poll_ms: Callable[[int], bool],
    deadline: Deadline,
    log: StallLog,
    on_timeout: Callable[[float], Exception],
    watch: Callable[[], None] | None = None,
) -> None:  # pragma: no mutate block (testing.blocked finds a wait by its code)
    """Return once ``poll_ms(ms)`` (a poll that blocks at most ``ms``) reports ready.
    ``watch`` runs before the deadline is checked, so even ``timeout=0`` names a dead
    peer rather than timing out."""
    while True:
        now = _monotonic()
        at = deadline.at
        if watch is not None:
            watch()
        if at is not None and now >= at:
            raise on_timeout(deadline.elapsed())
        log.tick(now)
        until = log.next_at() if at is None else min(at, log.next_at())
        if watch is not None:
            until = min(until, now + WATCH_INTERVAL)
        if poll_ms(max(int((until - now) * 1000) + 1, 1)):
            return
