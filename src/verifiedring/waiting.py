"""Bounded waiting: spin politely, then back off, log who is stuck, time out.

A wait polls a condition. For the first ``SPIN_SECONDS`` it yields the CPU
between polls (``os.sched_yield``), which keeps hand-off latency in the
microseconds when the peer is running; after that it sleeps, doubling from
``FIRST_SLEEP`` up to ``MAX_SLEEP``, so an idle reader costs well under 1% of a
core. While a wait lasts longer than ``log_interval`` it logs one warning per
interval naming what it waits for.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

SPIN_SECONDS = 1e-3
SPIN_BATCH = 16  # polls between clock reads while spinning
FIRST_SLEEP = 20e-6
MAX_SLEEP = 1e-3
DEFAULT_LOG_INTERVAL = 10.0

logger = logging.getLogger("verifiedring")


def wait_until(
    poll: Callable[[], bool],
    timeout: float | None,
    describe: Callable[[], str],
    on_timeout: Callable[[float], Exception],
    log_interval: float = DEFAULT_LOG_INTERVAL,
) -> None:
    """Return as soon as ``poll()`` is true. Call it after a poll that failed.

    ``timeout`` is in seconds (``None``: wait forever; ``0``: that failed poll
    was the only one). When it runs out, raises ``on_timeout(waited_seconds)``;
    it counts from the end of a first spin of ``SPIN_BATCH`` yields (microseconds).
    Every ``log_interval`` seconds of waiting, logs ``describe()`` at WARNING.
    """
    if timeout is not None:
        if timeout < 0:
            raise ValueError(f"timeout must be None or >= 0 seconds, got {timeout!r}")
        if timeout == 0:
            raise on_timeout(0.0)
    yield_cpu = os.sched_yield
    for _ in range(SPIN_BATCH):  # most hand-offs end here, before any clock read
        yield_cpu()
        if poll():
            return
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    next_log = start + log_interval
    sleep = FIRST_SLEEP
    while True:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise on_timeout(now - start)
        if now >= next_log:
            logger.warning(
                "pid %d still waiting after %.1f s: %s", os.getpid(), now - start, describe()
            )
            next_log = now + log_interval
        if now - start < SPIN_SECONDS:
            for _ in range(SPIN_BATCH):  # no clock read between these polls
                yield_cpu()
                if poll():
                    return
        else:
            if deadline is not None:
                sleep = min(sleep, max(deadline - now, 0.0))
            time.sleep(sleep)
            sleep = min(sleep * 2, MAX_SLEEP)
            if poll():
                return
