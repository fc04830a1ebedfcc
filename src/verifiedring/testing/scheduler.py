"""A deterministic step scheduler: real cursors in threads, one protocol step at a time.

The writer and each reader run the real cursors in their own threads
(:meth:`Scheduler.start_actor`); the :class:`Scheduler`, installed as their
:class:`~verifiedring.steps.StepObserver`, parks every thread in
``before_step`` until the test grants it that step (:meth:`Scheduler.grant`),
then waits until the actor parks at its next step. So at most one actor runs
at a time, the test (e.g. a hypothesis state machine) chooses the
interleaving, and nothing sleeps. A with-body may park too
(:meth:`Scheduler.park`) to let the test decide how the body ends.

Every ring step is passed on to a :class:`~verifiedring.testing.probe.RecordingObserver`
(if given), whose trace is what a failure message shows. Imports neither torch nor zmq.

The same scheduler is a :class:`~verifiedring.steps.QueueObserver` of a message
queue's ends: each actor parks at every ``begin``, pending the action named by the
one ``# spec:`` comment of the function that called it (``end`` records the action
that happened, to check against it), and between calls in :meth:`Scheduler.idle`.
A ring wait is outside every step: :class:`PollSeen` on the end's cursor marks an
actor that polls, so that a grant returns once the actor blocks there.
"""

from __future__ import annotations

import functools
import linecache
import re
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType

from ..steps import (
    READER_POLL_READ_FLAG,
    READER_POLL_WRITTEN,
    UNOBSERVED_STEPS,
    WRITER_POLL_READ_FLAG,
    WRITER_POLL_WRITTEN,
)
from .probe import RecordingObserver

HANDOFF_TIMEOUT = 10.0  # seconds; a hand-off slower than this is a hang
IDLE = "idle"  # the pending step of a queue actor between two calls (see Scheduler.idle)
UNNAMED = "?"  # the pending action of a begin whose function has no one spec comment
_SPEC = re.compile(r"# spec: (\w+)")


class Stopped(BaseException):
    """Raised inside an actor thread to unwind it at teardown (or after a hang)."""


@dataclass
class Actor:
    """One thread's position in the protocol, as the scheduler sees it."""

    name: str
    pending: tuple[str, ...] = ()  # the steps it may be granted next; () while it runs
    chunk: int = -1  # the chunk of its pending step
    flag: int | None = None  # the read-flag index of its pending step, if it names one
    grant: tuple[str, object] | None = None  # set by a rule, taken by the thread
    data: object = None  # what the last grant carried for the with-body
    pregranted: str | None = None  # a step already chosen by the rule that ran the body
    done: bool = False
    error: str | None = None
    delivered: list[bytes] = field(default_factory=list)  # reader: payloads consumed
    begun: str | None = None  # a queue actor's step begun, not yet ended
    polling: bool = False  # a queue actor polled its ring since its last step
    ended: list[Ended] = field(default_factory=list)  # a queue actor's steps, in order


@dataclass(frozen=True)
class Ended:
    """One queue step, as its ``begin`` named it and its ``end`` reported it."""

    begun: str
    action: str
    seq: int
    obj: object
    kind: str


@functools.cache
def site_action(code: CodeType) -> str:
    """The action of the one ``# spec:`` comment in the function of ``code`` (UNNAMED if
    it has none or several), those of steps no observer sees aside
    (:data:`~verifiedring.steps.UNOBSERVED_STEPS`): the step that function's ``begin``
    starts."""
    last = max(line for _, _, line in code.co_lines() if line is not None)
    names = {
        m.group(1)
        for n in range(code.co_firstlineno, last + 1)
        if (m := _SPEC.search(linecache.getline(code.co_filename, n)))
    } - UNOBSERVED_STEPS
    return names.pop() if len(names) == 1 else UNNAMED


class Scheduler:
    """A StepObserver that runs one actor at a time: every step waits for a grant."""

    def __init__(
        self, recorder: RecordingObserver | None = None,
        handoff_timeout: float = HANDOFF_TIMEOUT,
    ) -> None:
        self.recorder = recorder
        self.handoff_timeout = handoff_timeout
        self.actors: dict[str, Actor] = {}
        self._cond = threading.Condition()
        self._stopping = False

    # -- StepObserver (runs in the actor threads) -------------------------------------

    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        a = self.actors[actor]
        with self._cond:
            if a.pregranted == action:
                a.pregranted = None
            else:
                a.flag = reader
                a.data = self._park(a, (action,), chunk)[1]
        if self.recorder is not None:
            self.recorder.before_step(actor, action, chunk, reader)

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        if self.recorder is not None:
            self.recorder.after_step(actor, action, chunk, reader)

    # -- QueueObserver (runs in the actor threads) ------------------------------------

    def begin(self, actor: str) -> None:
        a = self.actors.get(actor)
        if a is None or self._stopping:  # no thread (a handshake, a close): unscheduled
            return
        action = site_action(sys._getframe(1).f_code)
        with self._cond:
            a.polling = False
            a.data = self._park(a, (action,), -1)[1]
            a.begun = action  # what the end is checked against

    def end(
        self, actor: str, action: str, seq: int, obj: object = None, kind: str = ""
    ) -> None:
        a = self.actors.get(actor)
        if a is None or self._stopping:
            return
        with self._cond:
            a.ended.append(Ended(a.begun or UNNAMED, action, seq, obj, kind))
            a.begun = None
            a.polling = False

    def idle(self, actor: str) -> object:
        """Wait between two calls until a rule grants IDLE; what the grant carried."""
        a = self.actors[actor]
        with self._cond:
            return self._park(a, (IDLE,), -1)[1]

    def polled(self, actor: str) -> None:
        """``actor`` polls its ring (it waits there unless the poll succeeds)."""
        a = self.actors[actor]
        with self._cond:
            a.polling = True
            self._cond.notify_all()

    # -- actor side -------------------------------------------------------------------

    def start_actor(self, name: str, body: Callable[[], None]) -> threading.Thread:
        """Register actor ``name`` and start a daemon thread calling ``body()`` over
        and over until :meth:`stop` (or a hang) unwinds it with :class:`Stopped`.
        Anything else ``body`` raises ends the actor with that traceback as its error."""
        self.actors[name] = Actor(name)

        def run() -> None:
            error = None
            try:
                while True:
                    body()
            except Stopped:
                pass
            except BaseException:
                error = traceback.format_exc()
            finally:
                self._finished(name, error)

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def park(self, actor: str, steps: tuple[str, ...], chunk: int) -> tuple[str, object]:
        """Wait inside a with-body until a rule grants one of ``steps``; that
        step then runs without a second grant when the cursor reaches it."""
        a = self.actors[actor]
        with self._cond:
            action, data = self._park(a, steps, chunk)
            a.pregranted = action
        return action, data

    def _park(self, a: Actor, steps: tuple[str, ...], chunk: int) -> tuple[str, object]:
        a.pending, a.chunk = steps, chunk
        self._cond.notify_all()
        granted = self._cond.wait_for(
            lambda: a.grant is not None or self._stopping, self.handoff_timeout
        )
        if self._stopping:
            raise Stopped
        if not granted or a.grant is None:
            a.error = f"{a.name} waited {self.handoff_timeout} s at {steps} for a grant"
            raise Stopped
        action, data = a.grant
        a.grant = None
        return action, data

    def _finished(self, actor: str, error: str | None) -> None:
        a = self.actors[actor]
        with self._cond:
            a.done, a.pending = True, ()
            a.error = a.error or error
            self._cond.notify_all()

    # -- rule side (the test's thread) ------------------------------------------------

    def grant(
        self, actor: str, action: str, data: object = None, wait: bool = True,
        blocked: Callable[[], bool] | None = None,
    ) -> str | None:
        """Let ``actor`` run ``action``; wait until it parks at its next step (with
        ``wait=False`` do not: the step blocks until another actor's step, e.g. a
        futex wait; :meth:`wait_parked` then waits for it), or -- with ``blocked`` --
        until it polls its ring while ``blocked()`` says the ring holds nothing for it.

        Returns None, or what went wrong (the actor hung or died)."""
        a = self.actors[actor]
        with self._cond:
            if action not in a.pending:
                return f"{actor} is at {a.pending}, not at {action}"
            a.pending, a.grant = (), (action, data)
            self._cond.notify_all()
            if not wait:
                return None
        return self.settle(actor, blocked)

    def settle(self, actor: str, blocked: Callable[[], bool] | None = None) -> str | None:
        """Wait until ``actor`` parks, or polls its ring while ``blocked()``; None, or
        what went wrong (the actor hung or died)."""
        a = self.actors[actor]
        with self._cond:
            if not self._cond.wait_for(
                lambda: bool(a.pending) or a.done
                or (a.polling and blocked is not None and blocked()),
                self.handoff_timeout,
            ):
                return f"{actor} did not reach its next step within {self.handoff_timeout} s"
            if a.done:
                return f"{actor} stopped: {a.error or 'its thread ended'}"
        return None

    def wait_parked(self, actor: str) -> str | None:
        """Wait until ``actor`` parks at its first (or next) step; None, or what went
        wrong."""
        a = self.actors[actor]
        with self._cond:
            if not self._cond.wait_for(lambda: bool(a.pending) or a.done, self.handoff_timeout):
                return f"{actor} did not reach its next step within {self.handoff_timeout} s"
        return a.error

    def stop(self) -> None:
        """Unwind every actor thread (each raises :class:`Stopped` where it waits)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()


class PollSeen:
    """A StepObserver for a queue end's ring cursor: tells the scheduler of each poll
    (the cursor's other steps run inside the queue step that the scheduler granted)."""

    POLLS = frozenset(
        (WRITER_POLL_WRITTEN, WRITER_POLL_READ_FLAG, READER_POLL_READ_FLAG, READER_POLL_WRITTEN)
    )

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched

    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        if action in self.POLLS:
            self.sched.polled(actor)

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        pass
