"""A deterministic step scheduler: real cursors in threads, one protocol step at a time.

The writer and each reader run the real cursors in their own threads
(:meth:`Scheduler.start_actor`); the :class:`Scheduler`, installed as their
:class:`~verifiedring.steps.StepObserver`, parks every thread in
``before_step`` until the test grants it that step (:meth:`Scheduler.grant`),
then waits until the actor parks at its next step. So at most one actor runs
at a time, the test (e.g. a hypothesis state machine) chooses the
interleaving, and nothing sleeps. A with-body may park too
(:meth:`Scheduler.park`) to let the test decide how the body ends.

Every step is passed on to a :class:`~verifiedring.testing.probe.RecordingObserver`,
whose trace is what a failure message shows. Imports neither torch nor zmq.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from .probe import RecordingObserver

HANDOFF_TIMEOUT = 10.0  # seconds; a hand-off slower than this is a hang


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


class Scheduler:
    """A StepObserver that runs one actor at a time: every step waits for a grant."""

    def __init__(
        self, recorder: RecordingObserver, handoff_timeout: float = HANDOFF_TIMEOUT
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
        self.recorder.before_step(actor, action, chunk, reader)

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        self.recorder.after_step(actor, action, chunk, reader)

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
        self, actor: str, action: str, data: object = None, wait: bool = True
    ) -> str | None:
        """Let ``actor`` run ``action``; wait until it parks at its next step (with
        ``wait=False`` do not: the step blocks until another actor's step, e.g. a
        futex wait; :meth:`wait_parked` then waits for it).

        Returns None, or what went wrong (the actor hung or died)."""
        a = self.actors[actor]
        with self._cond:
            if action not in a.pending:
                return f"{actor} is at {a.pending}, not at {action}"
            a.pending, a.grant = (), (action, data)
            self._cond.notify_all()
            if not wait:
                return None
            if not self._cond.wait_for(lambda: bool(a.pending) or a.done, self.handoff_timeout):
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
