"""A reader's waits: what ends them early, and what their stall lines say.

Every wait of a reader -- for its ring chunk, a frame, READY -- calls
:meth:`ReaderWaits.watch` while it waits. It raises :class:`CancelledError` once
the reader's ``shutdown()`` was called (a local reader's; vLLM's remote reader
goes on) or the call's ``cancel`` event is set, and :class:`BrokenPeerError` once
the writer has been seen gone for ``LOST_GRACE`` seconds with nothing received
meanwhile (frames sent before the writer went may still arrive). How a reader
sees its writer gone is its channel's (``lost``: the ring's lock, the remote
connection). A wait that stalls logs a line every ``log_interval`` seconds naming
who waits, for what, from whom, and since when the last message was there to take;
``quiet`` (``indefinite=True``, a worker's busy loop) logs none.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import zmq

from ..errors import BrokenPeerError, CancelledError, RingTimeoutError
from ..waiting import Deadline, StallLog
from .ages import took
from .lifecycle import ReaderLifecycle, ReaderState
from .outcomes import ReaderOutcomes
from .sockets import recv_frames

#: A reader raises "the writer is gone" once it has seen the writer gone for this long
#: and received nothing meanwhile (frames sent before the writer went still arrive).
LOST_GRACE = 0.5


class Cancel(Protocol):
    """What ``dequeue(cancel=...)`` accepts: a ``threading.Event`` or the like."""

    def is_set(self) -> bool: ...


def _never_lost() -> str | None:
    return None


class ReaderWaits:
    """The reader's wait state: its ``shutting_down`` flag (vLLM's attribute, which the
    reader reads and writes through), the ``cancel`` event and ``quiet`` of the call
    in progress, when its last message was there to take, and since when the writer
    has been seen gone. It shares the reader's lifecycle and outcomes and holds no
    reference to the reader."""

    __slots__ = ("_cancels_on_shutdown", "_life", "_lost_at", "_outcomes", "_who", "cancel",
                 "log_interval", "lost", "quiet", "shutting_down", "took_at")

    def __init__(self, life: ReaderLifecycle, outcomes: ReaderOutcomes,
                 who: Callable[[], str], cancels_on_shutdown: bool) -> None:
        self._life = life
        self._outcomes = outcomes
        self._who = who
        self._cancels_on_shutdown = cancels_on_shutdown
        #: vLLM's ``shutting_down``: set by ``shutdown()``, from any thread.
        self.shutting_down = False
        #: The cancel event of the dequeue in progress (consulted only while it waits).
        self.cancel: Cancel | None = None
        #: The dequeue in progress logs no stall line (``indefinite=True``).
        self.quiet = False
        #: Seconds between two stall lines of one wait.
        self.log_interval = math.inf
        #: When the last message was there to take (monotonic; 0: none yet).
        self.took_at = 0.0
        #: How this reader's channel sees the writer gone (a reason), else ``None``.
        self.lost: Callable[[], str | None] = _never_lost
        self._lost_at: float | None = None  # when the writer was first seen gone

    def stall_interval(self) -> float:
        """Seconds between two stall lines of the wait in progress (never, if quiet)."""
        return math.inf if self.quiet else self.log_interval

    def recv(self, sock: zmq.Socket[Any], deadline: Deadline, what: str) -> list[zmq.Frame]:
        """The next frames on ``sock``: :meth:`watch` while it waits, stall lines,
        :class:`RingTimeoutError` at ``deadline`` (no frame taken)."""
        writer = self._outcomes.writer

        def describe() -> str:
            return f"{self._who()} waits for {what} from {writer}{took(self.took_at)}"

        def timed_out(waited: float) -> RingTimeoutError:
            return RingTimeoutError(f"{self._who()} timed out after {waited:.3f} s waiting for "
                                    f"{what} from {writer}")

        log = StallLog(describe, self.stall_interval())
        try:
            return recv_frames(sock, deadline, log, timed_out, self.watch)
        except (RingTimeoutError, CancelledError, BrokenPeerError):
            self._life.receiving = False  # the wait ended it: no frame was taken
            raise

    def watch(self) -> None:
        """While the reader waits: raise :class:`CancelledError` if woken, or
        :class:`BrokenPeerError` if the writer is gone."""
        self.watch_cancel()
        how = self.lost()
        if how is None:
            self._lost_at = None  # back (a reconnect before READY): the grace starts over
            return
        now = time.monotonic()
        if self._lost_at is None:
            self._lost_at = now  # what it sent before it went may still be arriving
        elif now - self._lost_at >= LOST_GRACE:
            raise self.writer_gone(how)

    def watch_cancel(self) -> None:
        """Raise :class:`CancelledError` if the wait in progress is cancelled."""
        cancel = self.cancel
        if (self.shutting_down and self._cancels_on_shutdown) or (
            cancel is not None and cancel.is_set()
        ):
            self.cancelled()

    def cancelled(self) -> NoReturn:
        """Raise the :class:`CancelledError` of the wait in progress, saying why."""
        told = self._life.shutdown_total is not None
        shut = self.shutting_down and (self._cancels_on_shutdown or told)
        why = "shutdown() was called" if shut else "its cancel event was set"
        raise CancelledError(f"{self._who()}: the wait was cancelled: {why}")

    def writer_gone(self, how: str) -> BrokenPeerError:
        """The reader is BROKEN: its writer is gone (``how``)."""
        writer = self._outcomes.writer
        self._life.enter(ReaderState.BROKEN, f"{writer} is gone ({how})")
        return BrokenPeerError(f"{self._who()}: {writer} is gone ({how})")
