"""vLLM's reader wait knobs (``_spin_condition``, ``ReadTimeoutWithWarnings``) over
verifiedring's one wait loop (:func:`verifiedring.waiting.wait_for`).

:class:`SpinCondition` is a :class:`~verifiedring.waiting.Sleeper`: plugged into a
local reader's cursor (on the first read of the reader's ``_spin_condition``), the
reader's waits call its :meth:`~SpinCondition.wait` once per block, looked up on the
instance. ``wait`` yields the CPU while the reader is busy (``now <= last_read +
busy_loop_s``), else blocks once in :attr:`~SpinCondition.poller`, whose ``poll`` is
the reader's futex sleep (announce, re-check, block: ``ReaderCursor.sleep``). The
writer wakes it by futex, not by a zmq ping, so the three sockets are
:class:`StandInSocket`\\ s. One block lasts until the writer's publish, the deadline,
the next stall line, or :func:`block_cap` (the recheck interval, at most
:data:`WATCH_BOUND` so the dead-writer watch still runs): :func:`block_seconds`, the
rule :meth:`ReadTimeoutWithWarnings.timeout_ms` applies too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import zmq

from ..errors import MisuseError, RingTimeoutError
from ..queue.local_path import LocalPath
from ..ring import ReaderCursor
from ..waiting import Deadline, StallLog, block_seconds, to_ms

#: The longest one idle block lasts: the reader's dead-writer watch runs between blocks.
WATCH_BOUND = 0.5
#: vLLM's default for how long a reader yields (instead of blocking) after a read.
BUSY_LOOP_S = 1.0
_sources: dict[str, Callable[[], float]] = {
    "recheck_ms": lambda: 5000.0,
    "warning_interval": lambda: 60.0,
    "notify_poll_s": lambda: 2.0,
    "remote_poll_ms": lambda: 1.0,
}

__all__ = [
    "WATCH_BOUND", "ReadTimeoutWithWarnings", "SpinCondition", "StandInSocket",
    "block_cap", "remote_poll_wait_ms", "use_sources",
]


def use_sources(
    recheck_ms: Callable[[], float], warning_interval: Callable[[], float],
    notify_poll_s: Callable[[], float], remote_poll_ms: Callable[[], float],
) -> None:
    """Where the recheck interval (ms), the warning interval (s), the notify socket's
    poll interval (s) and a remote reader's poll wait (ms) are read, per call (compat's
    module variables, which vLLM's tests patch)."""
    _sources["recheck_ms"] = recheck_ms
    _sources["warning_interval"] = warning_interval
    _sources["notify_poll_s"] = notify_poll_s
    _sources["remote_poll_ms"] = remote_poll_ms


def remote_poll_wait_ms() -> float:
    """How long one poll of a compat remote reader's ``spin_until_readable`` lasts (ms)."""
    return _sources["remote_poll_ms"]()


def block_cap() -> float:
    """Seconds one idle block lasts at most: the recheck interval, capped at WATCH_BOUND."""
    return min(_sources["recheck_ms"]() / 1000, WATCH_BOUND)


class StandInSocket:
    """Where vLLM has a zmq socket that verifiedring does not need: closable, idempotently;
    nothing is ever queued on it (``poll`` says so, and counts the calls)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False
        self.polls = 0

    def poll(self, timeout: int | None = None) -> int:
        self.polls += 1
        return 0

    def close(self, linger: int | None = None) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return f"<stand-in for vLLM's {self.name}{' (closed)' if self.closed else ''}>"


class FutexPoller:
    """``poller.poll(timeout=ms)``: one block in the reader's futex sleep; a non-empty
    list when the ring's next chunk is ready afterwards, else ``[]``."""

    def __init__(self, cond: SpinCondition) -> None:
        self._cond = cond

    def poll(self, timeout: int | None = None) -> list[tuple[Any, int]]:
        cond = self._cond
        seconds = block_cap() if timeout is None else timeout / 1000
        cursor = cond.cursor
        if cond.futex:
            cursor.sleep(cond.recheck, seconds)
        else:  # no futex here: a short nap, as the core's doubling sleep
            time.sleep(min(seconds, 1e-3))
        return [(cond.local_notify_socket, zmq.POLLIN)] if cursor.poll() else []


class SpinCondition:
    """vLLM's reader ``_spin_condition``, the :class:`~verifiedring.waiting.Sleeper` of
    one local reader's waits (see the module's docstring)."""

    is_reader = True
    #: No spin of the core's first: a busy reader's yields are its ``wait`` calls.
    spin_seconds = 0.0

    @classmethod
    def plugged_into(cls, cursor: ReaderCursor, path: LocalPath) -> SpinCondition:
        """The SpinCondition of a local reader's ``cursor``, plugged on the first call into
        its waits (:meth:`ReaderCursor.use_sleeper`: it blocks in the futex where the
        cursor did, else naps) and into its ``path``'s reads (:meth:`record_read`)."""
        if isinstance(cursor.sleeper, cls):
            return cursor.sleeper
        cond = cls(cursor, futex=cursor.sleeper is not None)
        cursor.use_sleeper(cond)
        path.on_read = cond.record_read
        return cond

    def __init__(self, cursor: ReaderCursor, futex: bool) -> None:
        self.cursor = cursor
        self.futex = futex
        self.busy_loop_s = BUSY_LOOP_S
        #: When the reader last read a message (monotonic); 0 makes it idle now.
        self.last_read = time.monotonic()
        #: When :meth:`record_read` last polled the notify socket (vLLM 0.33's).
        self.last_notify_poll = self.last_read
        #: The wait's re-check (the reader's poll), set by each :meth:`sleep`.
        self.recheck: Callable[[], bool] = cursor.poll
        self.poller = FutexPoller(self)
        self.local_notify_socket = StandInSocket("local_notify_socket")
        self.read_cancel_socket = StandInSocket("read_cancel_socket")
        self.write_cancel_socket = StandInSocket("write_cancel_socket")

    @property
    def max_block(self) -> float:
        return block_cap()

    @property
    def max_idle_block(self) -> float:
        return block_cap()  # vLLM's recheck interval, idle or not

    def record_read(self) -> None:
        """After each read: ``last_read``; once per ``SHM_NOTIFY_POLL_INTERVAL_S`` a poll
        of the notify socket, as vLLM's (a stand-in here: nothing piles up on it)."""
        self.last_read = now = time.monotonic()
        if now - self.last_notify_poll >= _sources["notify_poll_s"]():
            self.last_notify_poll = now
            self.local_notify_socket.poll(timeout=0)

    def sleep(self, poll: Callable[[], bool], timeout: float) -> bool:
        """The core's block: one :meth:`wait` (the instance's, so a patched one is
        called); the caller polls after it."""
        self.recheck = poll
        self.wait(timeout_ms=to_ms(timeout))
        return False

    def wait(self, timeout_ms: int | None = None) -> None:
        """One wait step: a CPU yield while busy, else one block of the poller."""
        if time.monotonic() <= self.last_read + self.busy_loop_s:
            os.sched_yield()
        else:
            self.poller.poll(timeout=timeout_ms)

    def cancel(self) -> None:
        """End a block now (the reader re-checks; ``shutdown()`` does this too)."""
        self.cursor.cut_sleep()


class WriterSpinCondition:
    """vLLM's writer ``_spin_condition``: a publish wakes readers by futex, so
    ``notify`` does nothing and the socket is a stand-in."""

    is_reader = False
    busy_loop_s = 0.0
    last_read = 0.0

    def __init__(self) -> None:
        self.local_notify_socket = StandInSocket("local_notify_socket")
        self.read_cancel_socket = None
        self.write_cancel_socket = None
        self.poller = None

    def notify(self) -> None:
        """Nothing: WriterPublish's WriterWake already woke every sleeping reader."""

    def cancel(self) -> None:
        """Nothing: the writer has no wait to cancel (as vLLM's)."""

    def wait(self, timeout_ms: int | None = None) -> None:
        raise MisuseError(f"pid {os.getpid()}: the writer's _spin_condition cannot wait")


class ReadTimeoutWithWarnings:
    """vLLM's per-read timeout: :meth:`timeout_ms` is one block's bound by the reader's
    own rule (:func:`block_seconds`: the deadline, the next warning if ``should_warn``,
    :func:`block_cap`); :meth:`should_warn` says a warning line is due."""

    def __init__(self, timeout: float | None, should_warn: bool) -> None:
        self.timeout = timeout
        self.deadline = Deadline.after(timeout)
        self.started = time.monotonic()
        interval = _sources["warning_interval"]() if should_warn else float("inf")
        self._log = StallLog(lambda: "a read", interval)

    def timeout_ms(self) -> int:
        """Milliseconds the next block may last; :class:`RingTimeoutError` (a
        ``TimeoutError``) once the deadline has passed."""
        now = time.monotonic()
        at = self.deadline.at
        if at is not None and now >= at:
            raise RingTimeoutError(
                f"pid {os.getpid()}: read timed out after {now - self.started:.3f} s "
                f"(timeout {self.timeout} s)"
            )
        return to_ms(block_seconds(now, at, self._log.next_at(), block_cap()))

    def should_warn(self) -> bool:
        """Whether a warning is due now (once per interval; never without should_warn)."""
        return self._log.due(time.monotonic())
