"""A reader's per-message path: its ``dequeue``, and what its role does per message.

A reader end (:class:`~.reader.QueueReader`) holds one path, its role's: a local
reader's takes the ring chunk of each message (:class:`~.local_path.LocalPath`), a
remote reader's its frame off the TCP socket (:class:`~.remote_path.RemotePath`).
This base is what both share: the one ``dequeue`` (busy check, states, deadline,
the owed record's settling), the READY of the handshake and the SHUTDOWN that
closes the reader once every message is received.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, ClassVar, NoReturn

import zmq

from .. import engine
from ..arena import ArenaReader
from ..errors import BrokenPeerError, ClosedError, DecodeError, RingTimeoutError
from ..steps import READER_AWAIT_READY, READER_CLOSE, QueueObserver
from ..waiting import FOREVER, Deadline, StallLog, wait_readable
from . import wire
from .lifecycle import ReaderLifecycle, ReaderState, refusal
from .message_queue import busy
from .outcomes import ReaderOutcomes
from .reader_waits import Cancel, ReaderWaits

_IDLE = ReaderState.IDLE
_after = Deadline.after  # bound once: no bound method made per call


class ReaderPath:
    """What every reader role's path holds: the end's lifecycle, outcomes and waits
    (shared with the end), its observer and name, and the tensor arena's reader half
    (a local reader's of a queue with one)."""

    #: The states a dequeue goes on from (besides IDLE): this role's unfinished steps.
    _resumable: ClassVar[frozenset[ReaderState]] = frozenset((ReaderState.OWED,))

    def __init__(
        self, life: ReaderLifecycle, outcomes: ReaderOutcomes, waits: ReaderWaits,
        observer: QueueObserver | None, actor: str, who: Callable[[], str],
        arena: ArenaReader | None = None,
    ) -> None:
        self._life = life
        self._outcomes = outcomes
        self._waits = waits
        self._observer = observer
        self._actor = actor
        self._who = who
        self._arena = arena
        # Invariant: a thread is inside dequeue.
        self._busy = False
        self._closed = False

    def dequeue(self, timeout: float | None, cancel: Cancel | None, indefinite: bool) -> Any:
        """The reader's dequeue (:meth:`.QueueReader.dequeue`)."""
        if self._busy:
            raise busy(self._who(), "dequeue()")
        self._busy = True
        try:
            waits = self._waits
            waits.cancel = cancel  # consulted only while it waits (as vLLM's)
            waits.quiet = indefinite
            if timeout is None:  # the hot path: no call, no compare with None
                deadline, poll = FOREVER, False
            else:
                deadline, poll = _after(timeout), timeout == 0
            life = self._life
            state = life.state
            if state is not _IDLE and state not in self._resumable:
                raise refusal(state, self._who(), life.why)
            arena = self._arena
            if arena is not None:
                arena.begin(life.seq)  # the message its stubs may name
            if state is ReaderState.OWED:
                return self.pay_owed()
            got = self.take(deadline, poll) if state is _IDLE else self.unfinished(
                deadline, poll)
            # delivered: the record its decode made is spent (plain stores, then return);
            # it holds no reference to the object (a tensor's arena slot frees with it)
            life.seen is None or life.saw(_IDLE)  # checked if watched
            life.delivery.obj = None
            life.owed = None
            life.state = _IDLE
            return got
        except DecodeError as exc:
            life = self._life
            if life.owed is exc:  # its report, now: the record is spent (stores, then raise)
                life.seen is None or life.saw(_IDLE)  # checked if watched
                life.owed = None
                life.state = _IDLE
            raise
        except ClosedError:
            _wait_unfed(self, indefinite, deadline)
        finally:
            self._busy = False

    def told_shutdown(self) -> bool:
        """Whether this reader is closed by the writer's SHUTDOWN (not by close())."""
        return self._life.shutdown_total is not None and not self._closed

    @property
    def socket(self) -> zmq.Socket[Any]:
        """The socket READY and SHUTDOWN arrive on."""
        raise NotImplementedError

    def take(self, deadline: Deadline, poll: bool) -> Any:
        """The next message, from IDLE (``poll``: the caller's timeout is 0)."""
        raise NotImplementedError

    def unfinished(self, deadline: Deadline, poll: bool) -> Any:
        """A dequeue from one of the role's resumable states, left so by the last one."""
        raise NotImplementedError

    def look(self) -> bool:
        """Whether the next message is at the head (nothing consumed)."""
        raise NotImplementedError

    def pay_owed(self) -> Any:
        """What an interrupt cut, paid now (:meth:`ReaderOutcomes.pay_owed`)."""
        return self._outcomes.pay_owed()

    def close(self) -> None:
        """Let go of what the path holds (sockets, the ring's watch)."""
        self._closed = True
        self._let_go()

    def _let_go(self) -> None:
        raise NotImplementedError

    def await_ready(self, deadline: Deadline) -> None:
        """The reader's side of the handshake: wait for the writer's READY."""
        # spec: ReaderAwaitReady -- READY must be consumed before any dequeue
        outcomes = self._outcomes
        header = outcomes.header(self._waits.recv(self.socket, deadline, "READY")[0])
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
            obs.end(self._actor, READER_AWAIT_READY, header[1])
        if header[0] == wire.LATE:
            why = (f"it subscribed after {outcomes.writer} had sent READY to the readers "
                   "that joined in time: a reader cannot join a running queue, nor re-attach as "
                   "a rank that left it (the writer may have broken since)")
            outcomes.broken(why)
            raise BrokenPeerError(f"{self._who()}: {why}")
        if header[0] != wire.READY:
            raise BrokenPeerError(
                f"{self._who()}: expected READY as the first message, got "
                f"{wire.kind_name(header[0])} seq {header[1]}"
            )
        self._life.enter(ReaderState.IDLE)

    def _saw_shutdown(self, total: int) -> None:
        """The writer sent ``total`` messages in all: refuse once all are received."""
        life = self._life
        life.shutdown_total = total
        if life.seq >= total:
            # spec: ReaderClose -- every message received: from now on ClosedError
            life.enter(ReaderState.CLOSED, f"the writer shut the queue down after {total} messages")
            obs = self._observer
            if obs is not None:
                obs.begin(self._actor)
                obs.end(self._actor, READER_CLOSE, total)
            raise refusal(life.state, self._who(), life.why)


def _nothing_comes(ms: int) -> bool:
    """The poll of a wait for what cannot come: it waits ``ms`` and reports nothing."""
    time.sleep(ms / 1000)
    return False


def _wait_unfed(path: ReaderPath, indefinite: bool, deadline: Deadline) -> NoReturn:
    """The ClosedError being handled, raised again; or, where the engine policy waits
    after the writer's shutdown (``indefinite``, told SHUTDOWN), ``path``'s reader waits as
    for a writer that sends nothing more: until cancelled
    (:class:`CancelledError`: its cancel, or ``shutdown()``, which here ends a remote
    reader's wait too: vLLM's worker calls it once its executor is gone) or
    ``deadline`` (:class:`RingTimeoutError`); a signal handler's exception (vLLM's
    SIGTERM) ends it too."""
    if not (indefinite and engine.policy.wait_after_shutdown and path.told_shutdown()):
        raise  # the ClosedError its caller handles
    why = f"the writer shut the queue down after {path._life.shutdown_total} messages"

    waits = path._waits

    def timed_out(waited: float) -> RingTimeoutError:
        return RingTimeoutError(f"{path._who()} timed out after {waited:.3f} s: {why}")

    def watch() -> None:
        if waits.shutting_down:  # also a remote reader's: nothing more can come
            waits.cancelled()
        waits.watch_cancel()

    log = StallLog(lambda: f"{path._who()} waits: {why}", math.inf)
    wait_readable(_nothing_comes, deadline, log, timed_out, watch)
    waits.cancelled()  # the wait ends only by its watch, or the deadline
