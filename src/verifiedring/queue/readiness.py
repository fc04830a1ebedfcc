"""A reader's look and short wait for its next message (vLLM 0.34's ``readable()`` and
``spin_until_readable(pending, deadline)``), on the one waiting vocabulary.

An engine's step loop (vLLM's ``EngineCore._wait_for_output``) alternates between
``readable()`` (does a ``dequeue`` now return or raise without waiting: consumes
nothing) and ``spin_until_readable(pending, deadline)``: return as soon as a message is
at the head, ``pending`` (a ``collections.deque`` another thread appends to) is
non-empty, or ``time.monotonic()`` reaches ``deadline``; the caller re-checks.

* A local reader waits with :func:`spin_until`: :func:`~verifiedring.waiting.wait_for`
  over the ring, its spin first, then its futex sleep (woken by the writer's publish at
  once). Nothing wakes the futex when another thread appends to ``pending``, so each
  block lasts at most :data:`PENDING_LOOK_SECONDS`: ``pending`` is looked at that often.
* A remote reader polls its socket once, for at most its poll wait (:func:`remote_poll_ms`
  over :meth:`RemoteReader.poll_wait_ms <.remote_reader.RemoteReader.poll_wait_ms>`,
  vLLM's ``REMOTE_POLL_WAIT_MS``) and never past ``deadline``, unless ``pending`` is
  already non-empty.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sized

from ..waiting import Deadline, Sleeper, StallLog, wait_for

#: How long a remote reader's ``spin_until_readable`` polls its socket (vLLM's value).
REMOTE_POLL_WAIT_MS = 1
#: The longest one futex block of ``spin_until_readable`` lasts: how soon a local reader
#: sees ``pending`` grow while asleep (the ring's publish wakes it at once).
PENDING_LOOK_SECONDS = 1e-3

__all__ = [
    "PENDING_LOOK_SECONDS", "REMOTE_POLL_WAIT_MS",
    "remote_poll_ms", "spin_until",
]


def remote_poll_ms(deadline: float, wait_ms: float) -> int:
    """Milliseconds one remote poll of ``spin_until_readable`` lasts: the reader's poll
    wait ``wait_ms``, at most until ``deadline`` (monotonic seconds); 0 once it has
    passed."""
    left = (deadline - time.monotonic()) * 1000
    return max(0, math.ceil(min(wait_ms, left)))


class _PendingBounded:
    """A reader's sleeper whose blocks last at most :data:`PENDING_LOOK_SECONDS`."""

    __slots__ = ("_sleeper",)

    def __init__(self, sleeper: Sleeper) -> None:
        self._sleeper = sleeper

    @property
    def spin_seconds(self) -> float:
        return self._sleeper.spin_seconds

    @property
    def max_block(self) -> float:
        return min(self._sleeper.max_block, PENDING_LOOK_SECONDS)

    @property
    def max_idle_block(self) -> float:
        return self.max_block

    def sleep(self, poll: Callable[[], bool], timeout: float) -> bool:
        return self._sleeper.sleep(poll, timeout)


class _Passed(Exception):
    """The caller's deadline passed: ``spin_until`` returns."""


def _passed(waited: float) -> _Passed:
    return _Passed()


def _quiet() -> StallLog:
    return StallLog(str, math.inf)  # the caller's loop is the long wait, not this spin


def spin_until(
    ready: Callable[[], bool], pending: Sized, deadline: float, sleeper: Sleeper | None
) -> None:
    """Return once ``ready()`` or ``pending`` is non-empty, or at ``deadline`` (monotonic
    seconds): :func:`wait_for`, blocking in ``sleeper`` (if any) at most
    :data:`PENDING_LOOK_SECONDS` at a time."""

    def done() -> bool:
        return len(pending) > 0 or ready()

    if done():
        return
    bounded = None if sleeper is None else _PendingBounded(sleeper)
    try:
        wait_for(done, Deadline(deadline, time.monotonic()), _quiet, _passed, sleeper=bounded)
    except _Passed:
        return
