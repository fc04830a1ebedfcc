"""The real queue in stream mode, one spec action per rule, writer and reader concurrent.

The writer (``large_objects="stream"``) and one local reader run in their own
threads over a 3-chunk ring of 64 KiB chunks; a :class:`Scheduler`, installed as
both ends' QueueObserver, parks each at every step of ``spec/queue/MessageQueue.tla``
until a rule named after that step grants it (and between calls, until a
lower-case rule hands it the next ``enqueue`` or ``dequeue``). So the reader reads
a run's chunks while the writer is still writing it, the writer waits on a full
ring mid-run, and runs abort after their FIRST or after MORE chunks (an object
whose ``__reduce__`` raises part way through the stream), with the reader mid-run
or not. After every step the machine checks the spec's invariants on what the two
ends did (NoOutOfOrderInv, DeliveredPrefixInv, OutcomeInv); when its examples are
done, that every action it drives fired at least its floor of times.
"""

from __future__ import annotations

import pickle
import unittest
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.reader_transitions import assert_reader_moves_in_next
from support.step_machine import READER, StepActors
from support.transitions import assert_writer_moves_in_next
from support.unpicklable import FailsToLoad, Unpicklable
from test_queue_stateful import _check_floors, _settings

from verifiedring import DecodeError, MessageAbortedError, MessageQueue, MisuseError
from verifiedring.queue.lifecycle import ReaderState, WriterState
from verifiedring.steps import (
    READER_READ_RUN_CHUNK,
    READER_RELEASE_RUN_CHUNK,
    READER_TAKE_CHUNK,
    WRITER_ABORT_RUN,
    WRITER_ACTOR,
    WRITER_PUBLISH_CHUNK,
    WRITER_PUBLISH_RUN_CHUNK,
)
from verifiedring.testing.faults import observe_cursor
from verifiedring.testing.scheduler import HANDOFF_TIMEOUT, IDLE, Ended, PollSeen, Scheduler

pytestmark = pytest.mark.xdist_group("queue-machines")

CHUNK = 64 * 1024
MAX_CHUNKS = 3
#: The writer's steps that publish a ring chunk; the reader's that take or release one.
PUBLISHES = (WRITER_PUBLISH_CHUNK, WRITER_PUBLISH_RUN_CHUNK, WRITER_ABORT_RUN)
TAKES = (READER_TAKE_CHUNK, READER_READ_RUN_CHUNK)

objects = st.one_of(
    st.integers(0, 400_000).map(lambda n: b"\x02" * n),  # inline, or a run of 2-7 chunks
    st.integers(0, 40_000).map(lambda n: np.arange(n, dtype=np.int64)),  # out of band
)
#: How a message fails: not at all, when unpickled (DecodeError), or when pickled, past
#: the first chunk (the run aborts after FIRST) or several (after MORE).
fates = st.sampled_from(["ok", "decode", "abort"])


def encoded(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=5)


class RunStepMachine(StepActors, RuleBasedStateMachine):
    """Rules with spec names grant that step to the actor parked at it."""

    #: Each rule's spec action (the rule fires exactly it). tests/test_step_names.py
    #: checks these against the spec.
    ACTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "WriterPublishChunk": ("WriterPublishChunk",),
        "WriterPublishRunChunk": ("WriterPublishRunChunk",),
        "WriterAbortRun": ("WriterAbortRun",),
        "ReaderTakeChunk": ("ReaderTakeChunk",),
        "ReaderReadRunChunk": ("ReaderReadRunChunk",),
        "ReaderReleaseRunChunk": ("ReaderReleaseRunChunk",),
    }
    fired: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.sched = sched = Scheduler()
        self.writer = MessageQueue(
            1, 1, [0], max_chunk_bytes=CHUNK, max_chunks=MAX_CHUNKS,
            large_objects="stream", observer=sched,
        )
        self.reader = MessageQueue.create_from_handle(
            self.writer.export_handle(), 0, observer=sched
        )
        self.writer.wait_until_ready(10.0)  # the handshake: before the actors' threads
        self.reader.wait_until_ready(10.0)
        self.threads = [
            sched.start_actor(actor, lambda actor=actor: self._call(actor))  # type: ignore[misc]
            for actor in (WRITER_ACTOR, READER)
        ]
        observe_cursor(self.writer, PollSeen(sched))
        observe_cursor(self.reader, PollSeen(sched))
        #: For each sequence number: ("ok", pickle), ("decode",) or ("aborted",).
        self.outcome: dict[int, tuple[Any, ...]] = {}
        self.planned: tuple[Any, ...] = ()  # the outcome of the message being enqueued
        self.results: list[tuple[Any, ...]] = []  # what the reader's dequeues gave
        self.calls = 0  # dequeue calls handed to the reader
        self.seen = {WRITER_ACTOR: 0, READER: 0}  # the steps of each actor noted so far
        for actor in (WRITER_ACTOR, READER):
            self._check(sched.settle(actor))

    # -- the ring, as the two ends' steps left it --------------------------------------

    def published(self) -> int:
        return sum(e.action in PUBLISHES for e in self._ended(WRITER_ACTOR))

    def taken(self) -> int:
        return sum(e.action in TAKES for e in self._ended(READER))

    def released(self) -> int:
        return sum(
            e.action == READER_RELEASE_RUN_CHUNK
            or (e.action == READER_TAKE_CHUNK and e.kind != "first")
            for e in self._ended(READER)
        )

    def writer_blocked(self) -> bool:
        return self.published() - self.released() >= MAX_CHUNKS

    def reader_blocked(self) -> bool:
        return self.taken() == self.published()

    def _blocked(self, actor: str) -> Callable[[], bool]:
        return self.writer_blocked if actor == WRITER_ACTOR else self.reader_blocked

    # -- granting ----------------------------------------------------------------------

    def _grant(self, actor: str, action: str, data: object = None) -> None:
        self._check(self.sched.grant(actor, action, data, blocked=self._blocked(actor)))
        if actor == WRITER_ACTOR and not self.sched.actors[actor].pending:
            RunStepMachine.fired["writer waits on a full ring"] += 1
        other = READER if actor == WRITER_ACTOR else WRITER_ACTOR
        self._check(self.sched.settle(other, self._blocked(other)))  # it may go on now
        for who in (WRITER_ACTOR, READER):
            self._notes(who)

    def _note(self, e: Ended) -> None:
        assert e.action == e.begun, f"began {e.begun} but ended {e.action}"
        RunStepMachine.fired[e.action] += 1
        if e.action == WRITER_ABORT_RUN:
            self.outcome[e.seq] = ("aborted",)
            RunStepMachine.fired["abort after " + ("FIRST" if self._parts(e.seq) == 1
                                                   else "MORE")] += 1
            if self._reading(e.seq):
                RunStepMachine.fired["abort with the reader mid-run"] += 1
        elif e.action in PUBLISHES and e.seq not in self.outcome:
            self.outcome[e.seq] = self.planned
        if e.action == READER_READ_RUN_CHUNK and self._writing(e.seq):
            RunStepMachine.fired["reader reads a run being written"] += 1

    def _parts(self, seq: int) -> int:
        return sum(e.seq == seq and e.action == WRITER_PUBLISH_RUN_CHUNK
                   for e in self._ended(WRITER_ACTOR))

    def _writing(self, seq: int) -> bool:
        """The writer has not ended message ``seq``'s run yet."""
        return not any(e.seq == seq and e.kind in ("last", "abort")
                       for e in self._ended(WRITER_ACTOR))

    def _reading(self, seq: int) -> bool:
        return any(e.seq == seq and e.action in TAKES for e in self._ended(READER))

    # -- the writer --------------------------------------------------------------------

    @precondition(lambda self: self.at(WRITER_ACTOR, IDLE))
    @rule(obj=objects, fate=fates)
    def enqueue(self, obj: Any, fate: str) -> None:
        if fate == "ok":
            self.planned = ("ok", encoded(obj))
            self._grant(WRITER_ACTOR, IDLE, lambda: self.writer.enqueue(obj))
        elif fate == "decode":
            self.planned = ("decode",)
            self._grant(WRITER_ACTOR, IDLE, lambda: self.writer.enqueue([obj, FailsToLoad()]))
        else:
            self.planned = ("aborted",)
            self._grant(WRITER_ACTOR, IDLE, lambda: self._refused([obj, Unpicklable()]))

    def _refused(self, obj: Any) -> None:
        try:
            self.writer.enqueue(obj)
        except MisuseError as exc:
            assert "refuses to be pickled" in str(exc), str(exc)
        else:
            raise AssertionError("an unpicklable object was accepted")

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_PUBLISH_CHUNK))
    @rule()
    def WriterPublishChunk(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_PUBLISH_CHUNK)

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_PUBLISH_RUN_CHUNK))
    @rule()
    def WriterPublishRunChunk(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_PUBLISH_RUN_CHUNK)

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_ABORT_RUN))
    @rule()
    def WriterAbortRun(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_ABORT_RUN)

    # -- the reader --------------------------------------------------------------------

    def coming(self) -> bool:
        """A message the reader has not asked for has its first chunk published."""
        return len(self.outcome) > self.calls

    @precondition(lambda self: self.at(READER, IDLE) and self.coming())
    @rule()
    def dequeue(self) -> None:
        self.calls += 1
        self._grant(READER, IDLE, self._dequeue)

    def _dequeue(self) -> None:
        try:
            obj = self.reader.dequeue()
        except MessageAbortedError as exc:
            self.results.append(("aborted", exc.seq))
        except DecodeError as exc:
            assert "refuses to be rebuilt" in str(exc), str(exc)
            self.results.append(("decode", exc.seq))
        else:
            self.results.append(("ok", encoded(obj)))

    @precondition(lambda self: self.at(READER, READER_TAKE_CHUNK))
    @rule()
    def ReaderTakeChunk(self) -> None:
        self._grant(READER, READER_TAKE_CHUNK)

    @precondition(lambda self: self.at(READER, READER_READ_RUN_CHUNK))
    @rule()
    def ReaderReadRunChunk(self) -> None:
        self._grant(READER, READER_READ_RUN_CHUNK)

    @precondition(lambda self: self.at(READER, READER_RELEASE_RUN_CHUNK))
    @rule()
    def ReaderReleaseRunChunk(self) -> None:
        self._grant(READER, READER_RELEASE_RUN_CHUNK)

    # -- the spec's invariants, on what the ends did -----------------------------------

    @invariant()
    def WriterMovesInNextInv(self) -> None:
        """Every state move the writer took is a move of the spec's ``Next``."""
        assert_writer_moves_in_next(self.writer)

    @invariant()
    def ReaderMovesInNextInv(self) -> None:
        """Every state move the reader took is a move of the spec's ``Next``."""
        assert_reader_moves_in_next(self.reader)

    @invariant()
    def NoOutOfOrderInv(self) -> None:
        """No end ever saw a sequence number or kind it did not expect."""
        assert self.writer.state is not WriterState.BROKEN, self.writer
        assert self.reader.state is not ReaderState.BROKEN, self.reader

    @invariant()
    def DeliveredPrefixInv(self) -> None:
        """The reader's results are those of the first messages, in order (sequence
        numbers 0, 1, ...: a call that sent nothing used none)."""
        assert sorted(self.outcome) == list(range(len(self.outcome)))
        assert len(self.results) <= len(self.outcome)

    @invariant()
    def OutcomeInv(self) -> None:
        """Each result is what the writer did with that message: the object, or a
        DecodeError for one that failed to unpickle, or MessageAbortedError for an
        aborted run (never delivered as a success)."""
        for seq, got in enumerate(self.results):
            want = self.outcome[seq]
            assert got == (want if want[0] == "ok" else (want[0], seq)), (seq, got, want)

    # -- teardown: run both ends to the end --------------------------------------------

    def teardown(self) -> None:
        try:
            while True:
                if self.at(WRITER_ACTOR, IDLE) and self.at(READER, IDLE) and not self.coming():
                    break
                for actor in (READER, WRITER_ACTOR):
                    pending = self.sched.actors[actor].pending
                    if pending and pending != (IDLE,):
                        self._grant(actor, pending[0])
                        break
                else:
                    assert self.at(READER, IDLE) and self.coming(), "both ends stuck"
                    self.dequeue()
                self.OutcomeInv()
            assert len(self.results) == len(self.outcome)
        finally:
            self.sched.stop()  # unwinds the parked; after a failure, the waiting too:
            self.reader.shutdown()  # the reader's wait is cancelled,
            self.threads[1].join(HANDOFF_TIMEOUT)
            self.reader.close()  # and the writer's claim sees the reader leave
            self.threads[0].join(HANDOFF_TIMEOUT)
            self.writer.close()
            hung = [t.name for t in self.threads if t.is_alive()]
            assert not hung, f"still running after teardown: {hung}"


#: What a run must reach at least: about half the least of 9 random runs.
FLOORS = {
    WRITER_PUBLISH_CHUNK: 400, WRITER_PUBLISH_RUN_CHUNK: 200, WRITER_ABORT_RUN: 20,
    READER_TAKE_CHUNK: 500, READER_READ_RUN_CHUNK: 150, READER_RELEASE_RUN_CHUNK: 200,
    "abort after FIRST": 5, "abort after MORE": 12, "abort with the reader mid-run": 10,
    "reader reads a run being written": 50, "writer waits on a full ring": 50,
}


if TYPE_CHECKING:  # hypothesis builds the class on access (an untyped descriptor)
    _RunStepCase = unittest.TestCase
else:
    _RunStepCase = RunStepMachine.TestCase


class TestRunStepMachine(_RunStepCase):
    settings = _settings(100, 50)

    @classmethod
    def tearDownClass(cls) -> None:
        """The machine's own end: its floors, checked where it ran (never skipped)."""
        super().tearDownClass()
        _check_floors("TestRunStepMachine", RunStepMachine.fired, FLOORS)


del _RunStepCase  # a TestCase bound at module level would be collected and run too
