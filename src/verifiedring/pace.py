"""A ring reader's pace: how long its waits spin and when its blocks end, from how its
recent waits ended. Spinning is polling: the pace changes no step of the protocol
(``spec/sleep/ReaderSleep.tla``), only when a reader sleeps and when it polls.

* A wait spins ``longest`` seconds (``waiting.SPIN_SECONDS``). Once ``LATE_WAITS``
  waits in a row had their message come later than that after they began (a step
  every few milliseconds: each spin burned a core for nothing), the next waits sleep
  at once; as soon as one wait's message comes within ``longest`` (a burst), they spin
  again.
* A sleeping reader whose messages keep a rhythm (:meth:`Pace.window`) ends its block
  ``LEAD`` before the next one is due and, after ReaderEndSleep, polls for it until
  ``LEAD`` past that time: the writer finds it awake and wakes no one, and the step is
  taken at a spin's latency, not a wake-up's, for a small share of a core.
* A block's timeout ends it late (the kernel's timer slack; on a virtual machine, the
  host's timer and its wake-up of an idle virtual CPU, often longer than ``LEAD``). The
  pace keeps that lateness (the most recent, decaying) and ends the block that much
  earlier again, so the polls begin before the message, not after it.
* An arrival is stamped where the reader first sees it: a woken reader at the futex's
  return, a polling one at its poll. So the rhythm is the writer's, not the reader's
  wake-up path's.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

#: Waits in a row whose message came after their spin before the next waits sleep at once.
LATE_WAITS = 3
#: How long before a message the rhythm expects a sleeping reader's block ends, so that
#: it polls for the message instead (and at most as long after).
LEAD = 150e-6
#: The arrival gaps a rhythm is judged on (:meth:`Pace.window`).
RHYTHM = 4
#: How a block's kept timer lateness decays per block, and the most it is allowed (also
#: at most a quarter of the rhythm's period).
LATENESS_DECAY = 0.9
MAX_LATENESS = 1e-3

_monotonic = time.monotonic


class Pace:
    """One reader's pace (see the module docstring). :meth:`spin` is read once per wait,
    at its start; a sleep blocks in :meth:`block`, then calls :meth:`after_sleep`."""

    __slots__ = ("_arrivals", "_blocked", "_due", "_early", "_lasted", "_late", "_spun",
                 "_woke", "lateness", "longest")

    def __init__(self, longest: float) -> None:
        #: The longest spin (0: sleep at once; ``math.inf``: never sleep).
        self.longest = longest
        self._late = 0
        self._spun = longest
        self._blocked = False
        self._arrivals: list[float] = []
        self._lasted: float | None = None  # the last block's length and its early end
        self._early: float | None = None
        self._due = 0.0  # when the rhythm expects the next message (window's)
        self._woke = 0.0  # when the last block returned
        #: How late a block's timeout has lately ended it (seconds, decaying).
        self.lateness = 0.0

    def spin(self) -> float:
        """The spin of the wait that begins now."""
        if not self._blocked:
            self._late = 0  # the last wait ended in its spin
        self._blocked = False
        self._spun = 0.0 if self._late >= LATE_WAITS else self.longest
        return self._spun

    def blocked(self, lasted: float | None, early: float | None = None,
                bound: float = math.inf) -> bool:
        """A block of the current wait ended after ``lasted`` seconds (None: its
        re-check found the message, it never blocked), of its ``bound``, or ``early`` if
        :meth:`window` set one. Whether the reader should now poll for the message: its
        block ended early for it. A block woken well before its bound was woken for a
        message (or a cut): its arrival counts towards the rhythm."""
        self._blocked = True
        late = lasted is not None and self._spun + lasted > self.longest
        self._late = self._late + 1 if late else 0
        if lasted is None:
            return False
        if early is None and lasted < bound * 0.9:
            self.arrived(self._woke)
        return early is not None

    def arrived(self, now: float) -> None:
        """A message came at ``now`` to a sleeping reader (it was woken, or its polls
        after an early end of its block found it)."""
        arrivals = self._arrivals
        arrivals.append(now)
        if len(arrivals) > RHYTHM + 1:
            del arrivals[0]

    def window(self, now: float, bound: float = math.inf) -> float | None:
        """Seconds from ``now`` until the block of a sleeping reader should end, ``LEAD``
        and the kept timer lateness (at most a quarter of the period) before the next
        message the recent arrivals' rhythm expects; None without a steady rhythm (their
        gaps spread by more than half their median, or too short to sleep through), once
        that moment has passed, or if the block's ``bound`` ends it first."""
        a = self._arrivals
        if len(a) <= RHYTHM:
            return None
        gaps = sorted(a[i + 1] - a[i] for i in range(RHYTHM))
        period = gaps[RHYTHM // 2]
        if period < 4 * LEAD or gaps[-1] - gaps[0] > period / 2:
            return None
        self._due = due = a[-1] + period
        early = due - LEAD - min(self.lateness, period / 4) - now
        return early if 0 < early < bound else None

    def block(self, futex_wait: Callable[[int, int, float], None], address: int,
              timeout: float) -> None:
        """ReaderBlock's ``futex_wait`` on the sleep word at ``address`` (while it is 1),
        at most ``timeout`` seconds, ended early for a rhythm's next message."""
        began = _monotonic()
        self._early = early = self.window(began, timeout)
        futex_wait(address, 1, timeout if early is None else early)
        self._woke = woke = _monotonic()
        self._lasted = lasted = woke - began
        if early is not None and lasted >= early:  # its timeout ended it: how late
            self.lateness = min(max(lasted - early, self.lateness * LATENESS_DECAY),
                                MAX_LATENESS)

    def after_sleep(self, poll: Callable[[], bool], timeout: float) -> bool:
        """After ReaderEndSleep of a sleep whose re-check failed (``timeout`` its block's
        bound): if its block ended early for the rhythm, poll (yielding the CPU between
        polls) until ``LEAD`` past the message's due time (once, if something woke it
        before that early end); whether a poll found it."""
        lasted, self._lasted = self._lasted, None
        early = self._early
        if not self.blocked(lasted, early, timeout):
            return False
        if early is not None and lasted is not None and lasted < early:  # woken first
            found = poll()
            if found:
                self.arrived(self._woke)
            return found
        until = max(self._due, _monotonic()) + LEAD
        yield_cpu = os.sched_yield
        while not poll():
            if _monotonic() >= until:
                return False
            yield_cpu()
        self.arrived(_monotonic())
        return True
