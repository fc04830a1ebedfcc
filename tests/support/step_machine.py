"""What the step machines share (``tests/test_queue_steps.py``,
``tests/test_overflow_steps.py``): a writer and a reader as scheduler actors."""

from __future__ import annotations

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

    def _check(self, problem: str | None) -> None:
        if problem is not None:
            raise AssertionError(f"{problem}; writer's steps {self._ended(WRITER_ACTOR)[-6:]}, "
                                 f"reader's {self._ended(READER)[-6:]}")
