"""The remote reader, one spec action per rule, writer and reader concurrent.

The writer (no local reader) and one remote reader (loopback TCP, CurveZMQ) run in
threads, each parked at every step of ``spec/MessageQueue.tla`` by a
:class:`Scheduler` until the rule named after that step grants it. The window is
drawn (1, 2 or 4 messages, so the reader acknowledges every message): the writer
enqueues past it and waits for credit until the reader's ``RemoteRecvFrame``
acknowledges; the reader waits on its socket until the writer's send. A wait is
outside every step: the writer's polls of its acknowledgement socket and the
reader's of its frame socket tell the scheduler (:class:`PollsSeen`), so a grant
returns once the actor waits there. Every example ends with ``close()``:
``WriterShutdown`` (the writer then waits for the acknowledgements still owed),
``RemoteSeeShutdown`` and ``ReaderClose``. Some examples have a second remote
reader, outside the model, that the machine reads in step with every send; it
leaves while the writer waits for credit: ``WriterReaderLeft``,
``WriterTellBroken``, the reader gets every message sent, then ``RemoteSeeBroken``,
and every later call of either end is refused. After every step the machine checks
the spec's invariants on what the ends did (the writer never more than its window
ahead of the acknowledgements); at the end, that every action fired its floor.
"""

from __future__ import annotations

import threading
import unittest
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pytest
import zmq
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from support.step_machine import READER, StepActors
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

#: The writer's publish with no local reader (the spec's publish touches no ring) is
#: begun in ``QueueWriter._publish``, which has no ``# spec:`` comment of its own.
RINGLESS_PUBLISH = UNNAMED
#: The steps of the reader that take a frame from its socket.
TAKES = (REMOTE_RECV_FRAME, REMOTE_SEE_SHUTDOWN, REMOTE_SEE_BROKEN)
#: What a step may end as, other than the action its begin named.
ENDS_AS = {(RINGLESS_PUBLISH, WRITER_PUBLISH_CHUNK), (REMOTE_RECV_FRAME, REMOTE_SEE_SHUTDOWN),
           (REMOTE_RECV_FRAME, REMOTE_SEE_BROKEN)}

#: Enqueue calls before a rule may close the writer (teardown closes it in any case).
CLOSE_AFTER = 20

objects = st.one_of(
    st.integers(0, 20_000).map(lambda n: b"\x06" * n),  # in band
    st.integers(0, 5_000).map(lambda n: np.arange(n, dtype=np.int64)),  # out of band
)


class PollsSeen:
    """A queue end's socket whose every poll tells the scheduler that ``actor`` waits
    (a remote end's waits are socket polls, outside every step)."""

    def __init__(self, sock: zmq.Socket[Any], sched: Scheduler, actor: str) -> None:
        self.sock = sock
        self.sched = sched
        self.actor = actor

    def poll(self, timeout: int | None = None) -> int:
        self.sched.polled(self.actor)
        return self.sock.poll(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class RemoteStepMachine(StepActors, RuleBasedStateMachine):
    """Rules with spec names grant that step to the actor parked at it."""

    ACTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "WriterPublishChunk": ("WriterPublishChunk",),
        "WriterSendRemoteFrame": ("WriterSendRemoteFrame",),
        "WriterShutdown": ("WriterShutdown",), "WriterReaderLeft": ("WriterReaderLeft",),
        "WriterTellBroken": ("WriterTellBroken",), "RemoteRecvFrame": ("RemoteRecvFrame",),
        "RemoteSeeShutdown": ("RemoteSeeShutdown",), "ReaderClose": ("ReaderClose",),
        "RemoteSeeBroken": ("RemoteSeeBroken",),
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
        self.ended_with: tuple[Any, ...] | None = None  # its dequeue's ClosedError, ...
        self.refusals: list[str] = []  # the writer's refused enqueues, in order
        self.calls = self.enqueues = 0  # dequeues, enqueues handed to the ends
        self.sent = 0  # remote frames sent (messages completed)
        self.end_frame: tuple[str, int] | None = None  # ("shut" | "broken", total), sent
        self.shut = self.left = self.closed = False
        self.other: MessageQueue | None = None  # the reader outside the model
        self.seen = {WRITER_ACTOR: 0, READER: 0}

    @initialize(window=st.sampled_from([1, 2, 8]), other=st.booleans())
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
        for q in (self.writer, self.reader, self.other):
            if q is not None:
                q.wait_until_ready(HANDOFF_TIMEOUT)
        credit = self.writer._remote.credit  # type: ignore[attr-defined]
        credit._sock = PollsSeen(credit._sock, self.sched, WRITER_ACTOR)
        self.reader._sock = PollsSeen(self.reader._sock, self.sched, READER)  # type: ignore[attr-defined]
        self.threads = [
            self.sched.start_actor(actor, lambda actor=actor: self._call(actor))  # type: ignore[misc]
            for actor in (WRITER_ACTOR, READER)
        ]
        for actor in (WRITER_ACTOR, READER):
            self._check(self.sched.settle(actor))

    # -- what the two ends did ---------------------------------------------------------

    def taken(self) -> int:
        """Frames (SHUTDOWN, BROKEN too) the reader took from its socket."""
        return sum(e.action in TAKES for e in self._ended(READER))

    def frames(self) -> int:
        return self.sent + (self.end_frame is not None)

    def writer_blocked(self) -> bool:
        """The writer waits for an acknowledgement: in close(), for every message's; in
        enqueue(), for credit (``window`` messages sent and not acknowledged)."""
        if self.shut:
            return self.acked() < self.sent
        return self.sent - self.acked() >= self.window

    def acked(self) -> int:
        """The count the reader acknowledged last (every message, or with a window of 8
        every second one and any after which no frame was queued yet; and at SHUTDOWN)."""
        return int(self.reader._acks_sent)  # type: ignore[attr-defined]

    def reader_blocked(self) -> bool:
        return self.taken() >= self.frames()

    def _blocked(self, actor: str) -> Callable[[], bool]:
        return self.writer_blocked if actor == WRITER_ACTOR else self.reader_blocked

    def waiting(self, actor: str) -> bool:
        """``actor`` waits (it polls its socket) inside a call."""
        a = self.sched.actors[actor]
        return not a.pending and not a.done

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

    def _notes(self, actor: str) -> None:
        for e in self._ended(actor)[self.seen[actor]:]:
            self._note(e)
        self.seen[actor] = len(self._ended(actor))

    def _note(self, e: Ended) -> None:
        RemoteStepMachine.fired[e.action] += 1
        assert e.action == e.begun or (e.begun, e.action) in ENDS_AS, e
        if e.action == WRITER_PUBLISH_CHUNK:
            assert e.seq == self.sent and not self.left, (e, self.sent)
            self.outcome[e.seq] = self.planned
        elif e.action == WRITER_SEND_REMOTE_FRAME:
            assert e.seq == self.sent, (e, self.sent)
            # CreditOK, WriterSendRemoteFrame's guard: within the window of what the
            # reader acknowledged (the writer may know of fewer acknowledgements)
            assert e.seq - self.acked() < self.window, (e.seq, self.acked(), self.window)
            self.sent += 1
            if self.other is not None:
                self._read_other(e.seq)
        elif e.action == WRITER_SHUTDOWN:
            self.end_frame = ("shut", e.seq)
        elif e.action == WRITER_TELL_BROKEN:
            self.end_frame = ("broken", e.seq)
        elif e.action == REMOTE_SEE_SHUTDOWN:
            assert self.acked() == e.seq == self.sent, (e, self.acked(), self.sent)

    def _read_other(self, seq: int) -> None:
        """The other reader takes message ``seq`` at once (so its credit never holds the
        writer back): the same outcome as the modeled reader's."""
        assert self.other is not None
        try:
            got: tuple[Any, ...] = ("ok", encoded(self.other.dequeue(HANDOFF_TIMEOUT)))
        except DecodeError:
            got = ("decode",)
        assert got == self.outcome[seq], (seq, got, self.outcome[seq])

    # -- the writer --------------------------------------------------------------------

    def live(self) -> bool:
        """The writer may send more (it neither shut down nor broke)."""
        return not (self.shut or self.left)

    @precondition(lambda self: self.at(WRITER_ACTOR, IDLE))
    @rule(obj=objects, decodes=st.booleans())
    def enqueue(self, obj: Any, decodes: bool) -> None:
        sent = obj if decodes else [obj, FailsToLoad()]
        self.planned = ("ok", encoded(obj)) if decodes else ("decode",)
        refused = len(self.refusals)
        self.enqueues += 1
        self._grant(WRITER_ACTOR, IDLE, data=lambda: self._enqueue(sent))
        if (self.left or self.closed) and self.at(WRITER_ACTOR, IDLE):  # refused at once
            assert len(self.refusals) == refused + 1, self.refusals
            why = "the queue is closed" if self.closed else "broken since a reader left"
            assert why in self.refusals[-1], self.refusals
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

    @precondition(lambda self: self.other is not None and not self.left and not self.shut
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
        self.left = True
        self._grant(WRITER_ACTOR, WRITER_READER_LEFT, WRITER_READER_LEFT)
        assert self.writer.state is WriterState.BROKEN, self.writer

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_TELL_BROKEN))
    @rule()
    def WriterTellBroken(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_TELL_BROKEN, WRITER_TELL_BROKEN)
        assert len(self.refusals) == 1 and "is gone" in self.refusals[0], self.refusals

    # -- the reader --------------------------------------------------------------------

    def coming(self) -> bool:
        """A frame was sent that the reader has not asked for."""
        return self.frames() > self.calls

    @precondition(lambda self: self.at(READER, IDLE) and (
        self.coming() or self.ended_with is not None
        or (self.live() and self.calls == self.frames())))
    @rule()
    def dequeue(self) -> None:
        ended = self.ended_with
        self.calls += 1
        self._grant(READER, IDLE, data=self._dequeue)
        if ended is not None:  # closed or told for good: refused at once, the same
            assert self.ended_with is not None and self.ended_with[0] == ended[0]
            assert self.at(READER, IDLE) and ended[1].split(": ", 1)[1] in self.ended_with[1]
            RemoteStepMachine.fired["dequeue refused after the end"] += 1

    def _dequeue(self) -> None:
        try:
            obj = self.reader.dequeue(HANDOFF_TIMEOUT, cancel=self.cancel)
        except DecodeError as exc:
            assert "refuses to be rebuilt" in str(exc), str(exc)
            self.results.append(("decode", exc.seq))
        except ClosedError as exc:
            self.ended_with = ("shut", str(exc))
        except BrokenPeerError as exc:
            self.ended_with = ("broken", str(exc))
        else:
            self.results.append(("ok", encoded(obj)))

    def next_frame(self) -> str:
        """What the reader's socket holds next: "msg", "shut" or "broken"."""
        if self.taken() < self.sent:
            return "msg"
        assert self.end_frame is not None, "the reader took a frame never sent"
        return self.end_frame[0]

    @precondition(lambda self: self.at(READER, REMOTE_RECV_FRAME) and self.next_frame() == "msg")
    @rule()
    def RemoteRecvFrame(self) -> None:
        self._grant(READER, REMOTE_RECV_FRAME, REMOTE_RECV_FRAME)

    @precondition(lambda self: self.at(READER, REMOTE_RECV_FRAME)
                  and self.next_frame() == "shut")
    @rule()
    def RemoteSeeShutdown(self) -> None:
        owed = self.acked() < self.sent
        self._grant(READER, REMOTE_RECV_FRAME, REMOTE_SEE_SHUTDOWN)  # acknowledges them all
        RemoteStepMachine.fired["RemoteSeeShutdown acknowledges the rest"] += owed

    @precondition(lambda self: self.at(READER, READER_CLOSE))
    @rule()
    def ReaderClose(self) -> None:
        self._grant(READER, READER_CLOSE, READER_CLOSE)
        assert self.ended_with is not None and self.ended_with[0] == "shut", self.ended_with
        assert f"shut the queue down after {self.sent} messages" in self.ended_with[1]

    @precondition(lambda self: self.at(READER, REMOTE_RECV_FRAME)
                  and self.next_frame() == "broken")
    @rule()
    def RemoteSeeBroken(self) -> None:
        self._grant(READER, REMOTE_RECV_FRAME, REMOTE_SEE_BROKEN)
        assert self.ended_with is not None and self.ended_with[0] == "broken", self.ended_with
        want = f"broke for good after sending {self.sent} messages (broken since a reader left"
        assert want in self.ended_with[1], self.ended_with

    # -- the spec's invariants, on what the ends did -----------------------------------

    @invariant()
    def NoOutOfOrderInv(self) -> None:
        """No end saw a sequence number or kind it did not expect; the writer broke only
        where the other reader left."""
        if self.threads:
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

    def _ended_after_all(self, how: str) -> None:
        """The reader ended ``how`` only as the writer's end frame said, with every
        message sent received."""
        if self.ended_with is not None and self.ended_with[0] == how:
            assert self.end_frame == (how, self.sent), (self.end_frame, self.sent)
            assert len(self.results) == self.sent, (self.results, self.sent)

    @invariant()
    def ClosedAfterAllInv(self) -> None:
        """ClosedError only after SHUTDOWN(total) and every message received."""
        self._ended_after_all("shut")

    @invariant()
    def ToldAfterAllInv(self) -> None:
        """BrokenPeerError only after BROKEN(total) and every message received."""
        self._ended_after_all("broken")

    # -- teardown: run both ends to the end --------------------------------------------

    def _step(self) -> None:
        """Grant one step that makes progress: the rule named after an actor's step."""
        w, r = self.sched.actors[WRITER_ACTOR].pending, self.sched.actors[READER].pending
        if w == (RINGLESS_PUBLISH,):
            self.WriterPublishChunk()
        elif w and w != (IDLE,):
            getattr(self, w[0])()
        elif r and r != (IDLE,):
            if r == (REMOTE_RECV_FRAME,):
                {"msg": self.RemoteRecvFrame, "shut": self.RemoteSeeShutdown,
                 "broken": self.RemoteSeeBroken}[self.next_frame()]()
            else:
                getattr(self, r[0])()
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
                assert len(self.results) == self.sent
                self.dequeue()  # refused at once
        finally:
            self.sched.stop()  # unwinds the parked
            self.cancel.set()  # a reader waiting for a frame raises
            if self.threads:
                self.threads[1].join(HANDOFF_TIMEOUT)
                self.reader.close()  # a writer waiting for credit sees it leave
                self.threads[0].join(HANDOFF_TIMEOUT)
                for q in (self.other, self.writer):
                    if q is not None:
                        q.close()
            hung = [t.name for t in self.threads if t.is_alive()]
            assert not hung, f"still running after teardown: {hung}"


#: What a run must reach at least: about half the least of 10 runs.
FLOORS: dict[str, int] = {}

if TYPE_CHECKING:  # hypothesis builds the class on access (an untyped descriptor)
    _RemoteStepCase = unittest.TestCase
else:
    _RemoteStepCase = RemoteStepMachine.TestCase


class TestRemoteStepMachine(_RemoteStepCase):
    settings = _settings(100, 50)

    @classmethod
    def tearDownClass(cls) -> None:
        """The machine's own end: its floors, checked where it ran (never skipped)."""
        super().tearDownClass()
        _check_floors("TestRemoteStepMachine", RemoteStepMachine.fired, FLOORS)


del _RemoteStepCase  # a TestCase bound at module level would be collected and run too
