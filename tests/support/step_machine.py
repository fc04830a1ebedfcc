"""What the step machines share (``tests/test_queue_steps.py``,
``tests/test_overflow_steps.py``, ``tests/test_remote_steps.py``): a writer and a
reader as scheduler actors, and a socket whose polls the scheduler sees."""

from __future__ import annotations

from typing import Any

import zmq

from verifiedring.steps import WRITER_ACTOR, reader_actor
from verifiedring.testing.scheduler import Ended, Scheduler

READER = reader_actor(0)


class StepActors:
    """The writer and reader 0 of a machine's :class:`Scheduler` ``sched``."""

    sched: Scheduler

    def _call(self, actor: str) -> None:
        """An actor thread's body: wait for a call's grant, then make it."""
        job = self.sched.idle(actor)
        assert callable(job)
        job()

    def _ended(self, actor: str) -> list[Ended]:
        return self.sched.actors[actor].ended

    def at(self, actor: str, action: str) -> bool:
        return action in self.sched.actors[actor].pending

    def waiting(self, actor: str) -> bool:
        """``actor`` is inside a call, neither parked nor ended: it waits (it polls)."""
        a = self.sched.actors[actor]
        return not a.pending and not a.done

    seen: dict[str, int]  # per actor: how many of its steps were noted

    def _note(self, e: Ended) -> None:
        """What the machine makes of one ended step (each once, in order)."""
        raise NotImplementedError

    def _notes(self, actor: str) -> None:
        """Note the steps ``actor`` ended since the last call."""
        ended = self._ended(actor)
        for e in ended[self.seen[actor]:]:
            self._note(e)
        self.seen[actor] = len(ended)

    def _check(self, problem: str | None) -> None:
        if problem is not None:
            raise AssertionError(f"{problem}; writer's steps {self._ended(WRITER_ACTOR)[-6:]}, "
                                 f"reader's {self._ended(READER)[-6:]}")


class PollsSeen:
    """A queue end's socket whose every poll tells the scheduler that ``actor`` waits
    there (a remote end's waits are socket polls, outside every step)."""

    def __init__(self, sock: zmq.Socket[Any], sched: Scheduler, actor: str) -> None:
        self.sock = sock
        self.sched = sched
        self.actor = actor

    def poll(self, timeout: int | None = None) -> int:
        self.sched.polled(self.actor)
        return self.sock.poll(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)
