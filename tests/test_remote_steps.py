"""The remote reader, one spec action per rule, writer and reader concurrent.

The writer (no local reader) and a remote reader (loopback, CurveZMQ) in threads, each
parked at every step of ``spec/queue/MessageQueue.tla`` until the rule named after it grants
it; a window of 1, 2 or 8 (8: an acknowledgement every second message, or when no frame
is queued). The writer waits for credit, the reader for a frame: socket polls, outside
every step (:class:`PollsSeen`). ``close()`` ends each example (``WriterShutdown``, a wait
for acknowledgements that ``RemoteSeeShutdown`` sends, ``ReaderClose``). In some, another
reader outside the model leaves as the writer waits for credit: ``WriterReaderLeft``,
``WriterTellBroken``, ``RemoteSeeBroken``. The spec's invariants after every step.
"""

from __future__ import annotations

import threading
import unittest
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from support.step_machine import READER, PollsSeen, StepActors
from support.transitions import assert_writer_moves_in_next
from support.unpicklable import FailsToLoad
from test_queue_stateful import _check_floors, _settings, encoded

from verifiedring import BrokenPeerError, ClosedError, DecodeError, MessageQueue
from verifiedring.queue.lifecycle import ReaderState, WriterState
from verifiedring.steps import (
    READER_CLOSE,
    REMOTE_RECV_FRAME,
    REMOTE_SEE_BROKEN,
    REMOTE_SEE_SHUTDOWN,
    WRITER_ACTOR,
    WRITER_PUBLISH_CHUNK,
    WRITER_READER_LEFT,
    WRITER_SEND_REMOTE_FRAME,
    WRITER_SHUTDOWN,
    WRITER_TELL_BROKEN,
)
from verifiedring.testing.scheduler import HANDOFF_TIMEOUT, IDLE, UNNAMED, Ended, Scheduler

pytestmark = pytest.mark.xdist_group("queue-machines")

#: A publish with no local reader begins in ``QueueWriter._publish``: no ``# spec:`` there.
RINGLESS_PUBLISH = UNNAMED
TAKES = (REMOTE_RECV_FRAME, REMOTE_SEE_SHUTDOWN, REMOTE_SEE_BROKEN)  # a frame taken
#: (begun, ended) of a step that ends as another action than its begin named.
ENDS_AS = {(RINGLESS_PUBLISH, WRITER_PUBLISH_CHUNK)} | {(REMOTE_RECV_FRAME, a) for a in TAKES}
#: The rule for the reader at its RemoteRecvFrame step, by the frame it took.
FRAME_RULES = {"msg": REMOTE_RECV_FRAME, "shut": REMOTE_SEE_SHUTDOWN, "broken": REMOTE_SEE_BROKEN}
CLOSE_AFTER = 20  # enqueue calls before a rule may close the writer (teardown does anyway)

objects = st.one_of(st.integers(0, 20_000).map(lambda n: b"\x06" * n),  # in band, out of band:
                    st.integers(0, 5_000).map(lambda n: np.arange(n, dtype=np.int64)))


class RemoteStepMachine(StepActors, RuleBasedStateMachine):
    """Rules with spec names grant that step to the actor parked at it."""

    ACTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "WriterPublishChunk": ("WriterPublishChunk",), "WriterShutdown": ("WriterShutdown",),
        "WriterSendRemoteFrame": ("WriterSendRemoteFrame",), "ReaderClose": ("ReaderClose",),
        "WriterReaderLeft": ("WriterReaderLeft",), "WriterTellBroken": ("WriterTellBroken",),
        "RemoteRecvFrame": ("RemoteRecvFrame",), "RemoteSeeBroken": ("RemoteSeeBroken",),
        "RemoteSeeShutdown": ("RemoteSeeShutdown",),
    }
    fired: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.sched = Scheduler()
        self.threads: list[threading.Thread] = []
        self.cancel = threading.Event()  # unwinds a reader left waiting after a failure
        self.outcome: dict[int, tuple[Any, ...]] = {}  # per seq: ("ok", pickle), ("decode",)
        self.planned: tuple[Any, ...] = ()
        self.results: list[tuple[Any, ...]] = []  # what the reader's dequeues gave
        self.ended_with: tuple[str, str] | None = None  # ("shut" | "broken", its error)
        self.refusals: list[str] = []  # the writer's refused enqueues, in order
        self.calls = self.enqueues = 0  # dequeues, enqueues handed to the ends
        self.sent = 0  # remote frames sent (messages completed)
        self.end_frame: tuple[str, int] | None = None  # ("shut" | "broken", total), sent
        self.shut = self.left = self.closed = False
        self.other: MessageQueue | None = None  # the reader outside the model
        self.seen = {WRITER_ACTOR: 0, READER: 0}

    @initialize(window=st.sampled_from([1, 1, 2, 8]), other=st.booleans())
    def connect(self, window: int, other: bool) -> None:
        """The writer and the reader (and the other reader) join; the handshake."""
        self.window = window
        self.writer = MessageQueue(2 if other else 1, 0, [], connect_ip="127.0.0.1",
                                   remote_window=window, linger=HANDOFF_TIMEOUT,
                                   observer=self.sched)
        handle = self.writer.export_handle()
        self.reader = MessageQueue.create_from_handle(handle, 0, observer=self.sched)
        if other:
            self.other = MessageQueue.create_from_handle(handle, 1)
        for q in filter(None, (self.writer, self.reader, self.other)):
            q.wait_until_ready(HANDOFF_TIMEOUT)
        credit = self.writer._remote.credit  # type: ignore[attr-defined]
        credit._sock = PollsSeen(credit._sock, self.sched, WRITER_ACTOR)  # its acks
        path = self.reader._path  # type: ignore[attr-defined]
        path._sock = PollsSeen(path._sock, self.sched, READER)
        self.threads = [
            self.sched.start_actor(actor, lambda actor=actor: self._call(actor))  # type: ignore[misc]
            for actor in (WRITER_ACTOR, READER)
        ]
        for actor in (WRITER_ACTOR, READER):
            self._check(self.sched.settle(actor))

    def taken(self) -> int:
        """Frames (SHUTDOWN, BROKEN too) the reader took from its socket."""
        return sum(e.action in TAKES for e in self._ended(READER))

    def frames(self) -> int:
        return self.sent + (self.end_frame is not None)

    def acked(self) -> int:
        """The count the reader acknowledged last."""
        return int(self.reader._path._acks_sent)  # type: ignore[attr-defined]

    def writer_blocked(self) -> bool:
        """The writer waits for an acknowledgement: in close(), of every message; in
        enqueue(), for credit (``window`` messages sent and not acknowledged)."""
        return self.acked() < self.sent if self.shut else self.sent - self.acked() >= self.window

    def _blocked(self, actor: str) -> Callable[[], bool]:
        return self.writer_blocked if actor == WRITER_ACTOR else (
            lambda: self.taken() >= self.frames())

    def _grant(self, actor: str, step: str, ends: str | None = None, data: object = None) -> None:
        """Grant ``actor`` its pending ``step``; the next step it ends is ``ends``."""
        first = len(self._ended(actor))
        self._check(self.sched.grant(actor, step, data, blocked=self._blocked(actor)))
        if self.waiting(actor):
            RemoteStepMachine.fired["reader waits for a frame" if actor == READER else
                                    "close() waits for acknowledgements" if self.shut else
                                    "writer waits for credit"] += 1
        if ends is not None:
            got = [e.action for e in self._ended(actor)[first:first + 1]]
            assert got == [ends], f"{actor} granted {step} ended {got}, not {ends}"
        self._notes(actor)  # before the other goes on: what it may wait for is known
        other = READER if actor == WRITER_ACTOR else WRITER_ACTOR
        self._check(self.sched.settle(other, self._blocked(other)))
        self._notes(other)

    def _note(self, e: Ended) -> None:
        RemoteStepMachine.fired[e.action] += 1
        assert e.action == e.begun or (e.begun, e.action) in ENDS_AS, e
        if e.action == WRITER_PUBLISH_CHUNK:
            assert e.seq == self.sent and not self.left, (e, self.sent)
            self.outcome[e.seq] = self.planned
        elif e.action == WRITER_SEND_REMOTE_FRAME:
            # CreditOK, its guard: within the window of what the reader acknowledged
            assert e.seq == self.sent and e.seq - self.acked() < self.window, (e, self.acked())
            self.sent += 1
            if self.other is not None:
                self._read_other(e.seq)
        elif e.action in (WRITER_SHUTDOWN, WRITER_TELL_BROKEN):
            self.end_frame = ("shut" if e.action == WRITER_SHUTDOWN else "broken", e.seq)

    def _read_other(self, seq: int) -> None:
        """The other reader takes message ``seq`` at once (never holding the writer back)."""
        assert self.other is not None
        try:
            got: tuple[Any, ...] = ("ok", encoded(self.other.dequeue(HANDOFF_TIMEOUT)))
        except DecodeError:
            got = ("decode",)
        assert got == self.outcome[seq], (seq, got, self.outcome[seq])

    # -- the writer --------------------------------------------------------------------

    @precondition(lambda self: self.at(WRITER_ACTOR, IDLE))
    @rule(obj=objects, decodes=st.booleans())
    def enqueue(self, obj: Any, decodes: bool) -> None:
        sent = obj if decodes else [obj, FailsToLoad()]
        self.planned = ("ok", encoded(obj)) if decodes else ("decode",)
        refused = len(self.refusals)
        self.enqueues += 1
        self._grant(WRITER_ACTOR, IDLE, data=lambda: self._enqueue(sent))
        if (self.left or self.closed) and self.at(WRITER_ACTOR, IDLE):  # refused at once
            why = "the queue is closed" if self.closed else "broken since a reader left"
            assert len(self.refusals) == refused + 1 and why in self.refusals[-1], self.refusals
            RemoteStepMachine.fired["enqueue refused: " + why] += 1

    def _enqueue(self, obj: Any) -> None:
        try:
            self.writer.enqueue(obj, timeout=HANDOFF_TIMEOUT)
        except (BrokenPeerError, ClosedError) as exc:
            self.refusals.append(str(exc))

    @precondition(lambda self: self.at(WRITER_ACTOR, RINGLESS_PUBLISH))
    @rule()
    def WriterPublishChunk(self) -> None:
        self._grant(WRITER_ACTOR, RINGLESS_PUBLISH, WRITER_PUBLISH_CHUNK)

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_SEND_REMOTE_FRAME))
    @rule()
    def WriterSendRemoteFrame(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_SEND_REMOTE_FRAME, WRITER_SEND_REMOTE_FRAME)

    @precondition(lambda self: self.at(WRITER_ACTOR, IDLE) and not self.closed
                  and self.enqueues >= CLOSE_AFTER)
    @rule()
    def close(self) -> None:
        """``close()``: SHUTDOWN (unless broken), then the wait for acknowledgements."""
        self._grant(WRITER_ACTOR, IDLE, data=self.writer.close)
        self.closed = True

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_SHUTDOWN))
    @rule()
    def WriterShutdown(self) -> None:
        self.shut = True
        self._grant(WRITER_ACTOR, WRITER_SHUTDOWN, WRITER_SHUTDOWN)

    @precondition(lambda self: self.other is not None and not (self.left or self.shut)
                  and self.waiting(WRITER_ACTOR))
    @rule()
    def other_leaves(self) -> None:
        """The other reader closes while the writer waits for credit: its watch sees it."""
        assert self.other is not None
        self.other.close()
        self._check(self.sched.settle(WRITER_ACTOR))
        assert self.at(WRITER_ACTOR, WRITER_READER_LEFT), self.sched.actors[WRITER_ACTOR]

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_READER_LEFT))
    @rule()
    def WriterReaderLeft(self) -> None:
        self.left = True  # the writer is broken (NoOutOfOrderInv)
        self._grant(WRITER_ACTOR, WRITER_READER_LEFT, WRITER_READER_LEFT)

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_TELL_BROKEN))
    @rule()
    def WriterTellBroken(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_TELL_BROKEN, WRITER_TELL_BROKEN)
        want = "is gone: its connection to the remote socket closed"
        assert len(self.refusals) == 1 and want in self.refusals[0], self.refusals

    # -- the reader --------------------------------------------------------------------

    def coming(self) -> bool:
        """A frame was sent that the reader has not asked for."""
        return self.frames() > self.calls

    @precondition(lambda self: self.at(READER, IDLE) and (
        self.coming() or self.ended_with is not None
        or (not (self.shut or self.left) and self.calls == self.frames())))
    @rule()
    def dequeue(self) -> None:
        ended = self.ended_with
        self.calls += 1
        self._grant(READER, IDLE, data=self._dequeue)
        if ended is not None:  # closed or told for good: refused at once, the same error
            assert self.ended_with == ended and self.at(READER, IDLE), (self.ended_with, ended)
            RemoteStepMachine.fired["dequeue refused after the end"] += 1

    def _dequeue(self) -> None:
        try:
            obj = self.reader.dequeue(HANDOFF_TIMEOUT, cancel=self.cancel)
        except DecodeError as exc:
            assert "refuses to be rebuilt" in str(exc), str(exc)
            self.results.append(("decode", exc.seq))
        except (ClosedError, BrokenPeerError) as exc:
            self.ended_with = ("shut" if isinstance(exc, ClosedError) else "broken", str(exc))
        else:
            self.results.append(("ok", encoded(obj)))

    def next_frame(self) -> str:
        """What the reader's socket holds next: "msg", "shut" or "broken"."""
        if self.taken() < self.sent:
            return "msg"
        assert self.end_frame is not None, "the reader took a frame never sent"
        return self.end_frame[0]

    def at_frame(self, kind: str) -> bool:
        return self.at(READER, REMOTE_RECV_FRAME) and self.next_frame() == kind

    @precondition(lambda self: self.at_frame("msg"))
    @rule()
    def RemoteRecvFrame(self) -> None:
        self._grant(READER, REMOTE_RECV_FRAME, REMOTE_RECV_FRAME)

    @precondition(lambda self: self.at_frame("shut"))
    @rule()
    def RemoteSeeShutdown(self) -> None:
        owed = self.acked() < self.sent
        self._grant(READER, REMOTE_RECV_FRAME, REMOTE_SEE_SHUTDOWN)
        assert self.acked() == self.sent, (self.acked(), self.sent)  # every one acknowledged
        RemoteStepMachine.fired["RemoteSeeShutdown acknowledges the rest"] += owed

    @precondition(lambda self: self.at(READER, READER_CLOSE))
    @rule()
    def ReaderClose(self) -> None:
        self._grant(READER, READER_CLOSE, READER_CLOSE)
        assert self.ended_with is not None and self.ended_with[0] == "shut", self.ended_with
        assert f"shut the queue down after {self.sent} messages" in self.ended_with[1]

    @precondition(lambda self: self.at_frame("broken"))
    @rule()
    def RemoteSeeBroken(self) -> None:
        self._grant(READER, REMOTE_RECV_FRAME, REMOTE_SEE_BROKEN)
        want = f"broke for good after sending {self.sent} messages (broken since a reader left"
        assert self.ended_with is not None and want in self.ended_with[1], self.ended_with

    # -- the spec's invariants, on what the ends did -----------------------------------

    @invariant()
    def WriterMovesInNextInv(self) -> None:
        """Every state move the writer took is a move of the spec's ``Next``."""
        assert_writer_moves_in_next(self.writer)

    @invariant()
    def NoOutOfOrderInv(self) -> None:
        """No end saw a sequence number or kind it did not expect; the writer broke only
        where the other reader left."""
        assert self.reader.state is not ReaderState.BROKEN, self.reader
        broken = self.writer.state is WriterState.BROKEN
        assert broken == (self.left and not self.writer.closed), self.writer

    @invariant()
    def DeliveredPrefixInv(self) -> None:
        """The reader's results are those of the first messages, in order (sequence
        numbers 0, 1, ...; none used after the break)."""
        assert sorted(self.outcome) == list(range(len(self.outcome)))
        assert len(self.results) <= self.sent <= len(self.outcome) <= self.sent + 1

    @invariant()
    def OutcomeInv(self) -> None:
        """Each result is what the writer sent: the object, or DecodeError."""
        for seq, got in enumerate(self.results):
            want = self.outcome[seq]
            assert got == (("decode", seq) if want == ("decode",) else want), (seq, got, want)

    @invariant()
    def EndedAfterAllInv(self) -> None:
        """The spec's ClosedAfterAllInv and ToldAfterAllInv: ClosedError only after
        SHUTDOWN(total), BrokenPeerError only after BROKEN(total), each with every
        message received."""
        if self.ended_with is not None:
            assert self.end_frame == (self.ended_with[0], self.sent), (self.end_frame, self.sent)
            assert len(self.results) == self.sent, (self.results, self.sent)

    def _step(self) -> None:
        """Grant one step that makes progress: the rule named after an actor's step."""
        w, r = self.sched.actors[WRITER_ACTOR].pending, self.sched.actors[READER].pending
        if w and w != (IDLE,):
            getattr(self, WRITER_PUBLISH_CHUNK if w == (RINGLESS_PUBLISH,) else w[0])()
        elif r and r != (IDLE,):
            getattr(self, FRAME_RULES[self.next_frame()] if r == (REMOTE_RECV_FRAME,) else r[0])()
        elif self.at(WRITER_ACTOR, IDLE) and not self.closed:
            self.close()  # first: it waits for what the reader has not acknowledged
        else:
            assert self.at(READER, IDLE) and self.coming(), "both ends stuck"
            self.dequeue()

    def teardown(self) -> None:
        try:
            if self.threads:
                while not (self.closed and self.at(WRITER_ACTOR, IDLE) and self.at(READER, IDLE)
                           and self.ended_with is not None):
                    self._step()
                    self.OutcomeInv()
                self.dequeue()  # refused at once (EndedAfterAllInv: after every message)
        finally:
            self.sched.stop()  # unwinds the parked
            self.cancel.set()  # a reader waiting for a frame raises
            if self.threads:
                self.threads[1].join(HANDOFF_TIMEOUT)
                self.reader.close()  # a writer waiting for credit sees it leave
                self.threads[0].join(HANDOFF_TIMEOUT)
            for q in filter(None, (getattr(self, "reader", None), self.other,
                                   getattr(self, "writer", None))):
                q.close()
            hung = [t.name for t in self.threads if t.is_alive()]
            assert not hung, f"still running after teardown: {hung}"


#: A third of an idle machine's counts: which rules are enabled depends on thread timing.
FLOORS = {
    WRITER_PUBLISH_CHUNK: 450, WRITER_SEND_REMOTE_FRAME: 450, REMOTE_RECV_FRAME: 450,
    WRITER_SHUTDOWN: 250, REMOTE_SEE_SHUTDOWN: 250, READER_CLOSE: 250, WRITER_READER_LEFT: 15,
    WRITER_TELL_BROKEN: 15, REMOTE_SEE_BROKEN: 15, "writer waits for credit": 90,
    "close() waits for acknowledgements": 50, "RemoteSeeShutdown acknowledges the rest": 10,
    "reader waits for a frame": 380, "enqueue refused: broken since a reader left": 150,
    "enqueue refused: the queue is closed": 50, "dequeue refused after the end": 330,
}

if TYPE_CHECKING:  # hypothesis builds the class on access (an untyped descriptor)
    _RemoteStepCase = unittest.TestCase
else:
    _RemoteStepCase = RemoteStepMachine.TestCase


class TestRemoteStepMachine(_RemoteStepCase):
    settings = _settings(200, 50)  # the rarest, WriterReaderLeft, fires about 50 times

    @classmethod
    def tearDownClass(cls) -> None:
        """The machine's own end: its floors, checked where it ran (never skipped)."""
        super().tearDownClass()
        _check_floors("TestRemoteStepMachine", RemoteStepMachine.fired, FLOORS)


del _RemoteStepCase  # a TestCase bound at module level would be collected and run too
