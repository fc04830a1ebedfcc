"""The overflow flavor, one spec action per rule, writer and reader concurrent.

The writer (``large_objects="socket"``: an object larger than a 4 KiB chunk leaves
its marker in the ring and goes as a frame on the local socket) and one local
reader run in their own threads over a 3-chunk ring; a :class:`Scheduler`,
installed as both ends' QueueObserver, parks each at every step of
``spec/MessageQueue.tla`` until a rule named after that step grants it. The
reader's ring cursor is wrapped (:class:`RingGate`): a failed poll in its ring
wait parks it there too, so the writer may publish a marker and send its frame
while the reader waits, and the reader then drains that frame from its socket
(``ReaderStash``) and takes it from the stash for the marker (``ReaderRecvFrame``).

Some examples start with a wedged subscriber: a second SUB on the writer's local
socket that never reads, its pipe filled before the reader joins, so that the
pipe reaches its high-water mark (for real) after a drawn number of further frames;
the writer's next frame send blocks there and fails (``WriterSendFails``, its send
timeout shortened). The wedged subscriber then reads what it was sent, so BROKEN
reaches the reader (``WriterTellBroken``, ``ReaderSeeBroken``, ``ReaderTold``):
every later enqueue raises BrokenPeerError, no sequence number is used again, and
the reader gets every message before the failed one, then BrokenPeerError, for
good. After every step the machine checks the spec's invariants on what the ends
did; when its examples are done, that every action it drives fired its floor.
"""

from __future__ import annotations

import contextlib
import sys
import unittest
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pytest
import zmq
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from support.unpicklable import FailsToLoad
from test_queue_stateful import _check_floors, _settings, encoded

from verifiedring import BrokenPeerError, DecodeError, MessageQueue
from verifiedring.queue import wire
from verifiedring.queue.flavors.overflow import OverflowReader
from verifiedring.queue.lifecycle import ReaderState, WriterState
from verifiedring.queue.sockets import hwm_for_window
from verifiedring.ring import ReaderCursor
from verifiedring.steps import (
    READER_RECV_FRAME,
    READER_SEE_BROKEN,
    READER_STASH,
    READER_TAKE_CHUNK,
    READER_TOLD,
    WRITER_ACTOR,
    WRITER_PUBLISH_CHUNK,
    WRITER_SEND_FAILS,
    WRITER_SEND_LOCAL_FRAME,
    WRITER_TELL_BROKEN,
    reader_actor,
)
from verifiedring.testing.faults import (
    look_at_socket_next,
    reader_socket,
    replace_reader_cursor,
    send_frame,
    writer_sockets,
)
from verifiedring.testing.scheduler import HANDOFF_TIMEOUT, IDLE, Ended, PollSeen, Scheduler

pytestmark = pytest.mark.xdist_group("queue-machines")

CHUNK = 4096
MAX_CHUNKS = 3
READER = reader_actor(0)
RING_WAIT = "ring wait"  # the reader's pending step while RingGate holds it
LOOK = "look"  # what a RING_WAIT grant carries to make the reader drain its socket now
WAIT_MS = int(HANDOFF_TIMEOUT * 1000)
SEND_TIMEOUT_MS = 50  # the writer's send blocked at the mark fails after this
#: A pipe on the writer's XPUB takes this many messages before a send blocks; the
#: fill frames are larger than a socket buffer, so the subscriber's side takes only a
#: few of them, fewer than libzmq's batch of read reports (hwm + 1) // 2.
PIPE_MESSAGES = hwm_for_window(MAX_CHUNKS + 1)
FILL = bytes(1 << 20)

objects = st.one_of(
    st.integers(0, 6_000).map(lambda n: b"\x04" * n),  # inline below ~4 KiB, else a frame
    st.integers(5_000, 60_000).map(lambda n: b"\x05" * n),  # a frame
    st.integers(600, 3_000).map(lambda n: np.arange(n, dtype=np.int64)),  # a frame, out of band
)

_RING_WAIT_CODE = OverflowReader._ring_or_shutdown.__code__


class RingGate:
    """Stands in for the reader's ring cursor: a poll that fails inside the reader's ring
    wait parks the reader at RING_WAIT until a rule grants it; granted LOOK, it waits
    until its socket holds a frame and drains the socket right after the poll."""

    def __init__(self, cursor: ReaderCursor, sched: Scheduler, reader: MessageQueue) -> None:
        self.cursor = cursor
        self.sched = sched
        self.reader = reader
        self.sock = reader_socket(reader)

    def poll(self) -> bool:
        if self.cursor.poll():
            return True
        in_ring_wait = sys._getframe(1).f_code is _RING_WAIT_CODE
        if in_ring_wait and self.sched.park(READER, (RING_WAIT,), -1)[1] == LOOK:
            assert self.sock.poll(WAIT_MS), "the frame sent never reached the reader"
            look_at_socket_next(self.reader)
        return False

    def __enter__(self) -> memoryview:
        return self.cursor.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.cursor.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cursor, name)


class OverflowStepMachine(RuleBasedStateMachine):
    """Rules with spec names grant that step to the actor parked at it."""

    ACTIONS: ClassVar[dict[str, tuple[str, ...]]] = {
        "WriterPublishChunk": ("WriterPublishChunk",),
        "WriterSendLocalFrame": ("WriterSendLocalFrame",),
        "WriterSendFails": ("WriterSendFails",),
        "WriterTellBroken": ("WriterTellBroken",),
        "ReaderTakeChunk": ("ReaderTakeChunk",),
        "ReaderStash": ("ReaderStash",),
        "ReaderRecvFrame": ("ReaderRecvFrame",),
        "ReaderSeeBroken": ("ReaderSeeBroken",),
        "ReaderTold": ("ReaderTold",),
    }
    fired: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        self.sched = Scheduler()
        self.writer = MessageQueue(1, 1, [0], max_chunk_bytes=CHUNK, max_chunks=MAX_CHUNKS,
                                   observer=self.sched)
        self.threads: list[Any] = []
        self.cleanup = contextlib.ExitStack()
        self.wedged: zmq.Socket[Any] | None = None
        self.room = -1  # frames the wedged pipe still takes (-1: no wedge, or not now)
        self.queued = self.drained = 0  # messages sent to the wedged subscriber, read
        self.outcome: dict[int, tuple[Any, ...]] = {}  # per seq: ("ok", pickle), ...
        self.planned: tuple[Any, ...] = ()
        self.results: list[tuple[Any, ...]] = []  # what the reader's dequeues gave
        self.calls = 0
        self.failed_seq = -1  # the message whose frame send failed
        self.refusals: list[str] = []  # the broken writer's errors, in order
        self.seen = {WRITER_ACTOR: 0, READER: 0}
        #: Frames (and BROKEN) queued for the reader, taken from its socket, stashed.
        self.socket_in = self.socket_out = self.stashed = 0

    @initialize(room=st.sampled_from([None, None, 0, 1, 2, 4]))
    def connect(self, room: int | None) -> None:
        handle = self.writer.export_handle()
        if room is not None:
            self._wedge(handle.local_subscribe_addr, room)
        self.reader = MessageQueue.create_from_handle(handle, 0, observer=self.sched)
        self.cleanup.callback(self.reader.close)
        self.writer.wait_until_ready(10.0)
        self.reader.wait_until_ready(10.0)
        self.queued += room is not None  # READY
        gate = RingGate(self.reader._cursor, self.sched, self.reader)  # type: ignore[attr-defined]
        self.cleanup.enter_context(replace_reader_cursor(self.reader, gate))
        self.writer._local.cursor.observer = PollSeen(self.sched)  # type: ignore[attr-defined]
        self.threads = [
            self.sched.start_actor(actor, lambda actor=actor: self._call(actor))  # type: ignore[misc]
            for actor in (WRITER_ACTOR, READER)
        ]
        for actor in (WRITER_ACTOR, READER):
            self._check(self.sched.settle(actor))

    def _wedge(self, address: str | None, room: int) -> None:
        """A subscriber that never reads, its pipe ``room`` frames short of the mark
        once READY is sent (the fill goes before the reader joins: to it alone)."""
        assert address is not None
        sock: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.SUB)
        self.wedged = sock
        self.cleanup.callback(sock.close, 0)
        sock.setsockopt(zmq.RCVHWM, 1)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(address)
        xpub = writer_sockets(self.writer)[0]
        assert xpub is not None and xpub.poll(WAIT_MS), "the subscription never arrived"
        xpub.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
        for _ in range(PIPE_MESSAGES - 1 - room):
            send_frame(self.writer, "local", [wire.control_header(wire.READY, 0), FILL])
        self.queued, self.room = PIPE_MESSAGES - 1 - room, room

    def _unwedge(self) -> None:
        """The wedged subscriber reads every message it was sent (in order); so the
        writer's pipe has room again once the writer's socket runs its commands."""
        assert self.wedged is not None
        while self.drained < self.queued:
            assert self.wedged.poll(WAIT_MS), f"{self.drained} of {self.queued} arrived"
            self.wedged.recv_multipart()
            self.drained += 1
        self.room = -1

    def _call(self, actor: str) -> None:
        job = self.sched.idle(actor)
        assert callable(job)
        job()

    # -- what the two ends' steps did --------------------------------------------------

    def _ended(self, actor: str) -> list[Ended]:
        return self.sched.actors[actor].ended

    def _count(self, actor: str, action: str) -> int:
        return sum(e.action == action for e in self._ended(actor))

    def published(self) -> list[Ended]:
        return [e for e in self._ended(WRITER_ACTOR) if e.action == WRITER_PUBLISH_CHUNK]

    def taken(self) -> int:
        return self._count(READER, READER_TAKE_CHUNK)

    def writer_blocked(self) -> bool:
        return len(self.published()) - self.taken() >= MAX_CHUNKS

    def frames_sent(self) -> set[int]:
        return {e.seq for e in self._ended(WRITER_ACTOR) if e.action == WRITER_SEND_LOCAL_FRAME}

    def told(self) -> bool:
        return self._count(WRITER_ACTOR, WRITER_TELL_BROKEN) > 0

    def backlog(self) -> int:
        """Frames (BROKEN too) on the reader's socket that it has not taken yet."""
        return self.socket_in - self.socket_out

    def at(self, actor: str, action: str) -> bool:
        return action in self.sched.actors[actor].pending

    # -- granting ----------------------------------------------------------------------

    def _check(self, problem: str | None) -> None:
        if problem is not None:
            raise AssertionError(f"{problem}; writer's steps {self._ended(WRITER_ACTOR)[-6:]}, "
                                 f"reader's {self._ended(READER)[-6:]}")

    def _grant(self, actor: str, pending: str, ends: str | None = None,
               data: object = None) -> None:
        """Grant ``actor`` its ``pending`` step; the next step it ends is ``ends``."""
        first = len(self._ended(actor))
        blocked = self.writer_blocked if actor == WRITER_ACTOR else None
        self._check(self.sched.grant(actor, pending, data, blocked=blocked))
        if actor == WRITER_ACTOR and not self.sched.actors[actor].pending:
            OverflowStepMachine.fired["writer waits on a full ring"] += 1
        other = READER if actor == WRITER_ACTOR else WRITER_ACTOR
        self._check(self.sched.settle(other, self.writer_blocked if other == WRITER_ACTOR
                                      else None))
        if ends is not None:
            got = [e.action for e in self._ended(actor)[first:first + 1]]
            assert got == [ends], f"{actor} granted {pending} ended {got}, not {ends}"
        for who in (WRITER_ACTOR, READER):
            for e in self._ended(who)[self.seen[who]:]:
                self._note(e)
            self.seen[who] = len(self._ended(who))

    def _note(self, e: Ended) -> None:
        OverflowStepMachine.fired[e.action] += 1
        sends = (WRITER_SEND_LOCAL_FRAME, WRITER_SEND_FAILS)
        assert e.action == e.begun or (e.begun, e.action) == sends, e
        if e.action == WRITER_PUBLISH_CHUNK:
            assert self.failed_seq < 0, f"message seq {e.seq} published after the break"
            self.outcome[e.seq] = self.planned
        elif e.action == WRITER_SEND_FAILS:
            self.failed_seq = e.seq
            self.outcome[e.seq] = ("broken",)
        elif e.action in (WRITER_SEND_LOCAL_FRAME, WRITER_TELL_BROKEN):
            self.queued += self.wedged is not None
            self.socket_in += 1
        elif e.action in (READER_STASH, READER_SEE_BROKEN):
            self.socket_out += 1
            self.stashed += e.action == READER_STASH
        elif e.action == READER_RECV_FRAME:
            if self.stashed:  # _take_frame takes the stash first
                self.stashed -= 1
                OverflowStepMachine.fired["frame taken from the stash"] += 1
            else:
                self.socket_out += 1

    # -- the writer --------------------------------------------------------------------

    @precondition(lambda self: self.at(WRITER_ACTOR, IDLE))
    @rule(obj=objects, decodes=st.booleans())
    def enqueue(self, obj: Any, decodes: bool) -> None:
        sent = obj if decodes else [obj, FailsToLoad()]
        self.planned = ("ok", encoded(obj)) if decodes else ("decode",)
        refused = len(self.refusals)
        self._grant(WRITER_ACTOR, IDLE, data=lambda: self._enqueue(sent))
        if self.told():  # broken for good: refused at once, nothing published
            self._check(self.sched.settle(WRITER_ACTOR))
            want = f"broken since sending overflow frame seq {self.failed_seq} failed"
            assert len(self.refusals) == refused + 1, self.refusals
            assert want in self.refusals[-1], self.refusals[-1]
            OverflowStepMachine.fired["enqueue refused after the break"] += 1

    def _enqueue(self, obj: Any) -> None:
        try:
            self.writer.enqueue(obj)
        except BrokenPeerError as exc:
            self.refusals.append(str(exc))

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_PUBLISH_CHUNK))
    @rule()
    def WriterPublishChunk(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_PUBLISH_CHUNK, WRITER_PUBLISH_CHUNK)

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_SEND_LOCAL_FRAME) and self.room
                  and not self.waiting_with_a_frame())
    @rule()
    def WriterSendLocalFrame(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_SEND_LOCAL_FRAME, WRITER_SEND_LOCAL_FRAME)
        self.room -= self.room > 0

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_SEND_LOCAL_FRAME)
                  and self.room == 0)
    @rule()
    def WriterSendFails(self) -> None:
        """The wedged pipe is at its mark: the send blocks, then fails; the writer is
        broken and parks where it tells the readers."""
        self._grant(WRITER_ACTOR, WRITER_SEND_LOCAL_FRAME, WRITER_SEND_FAILS)
        assert self.writer.state is WriterState.BROKEN, self.writer
        self._unwedge()
        xpub = writer_sockets(self.writer)[0]
        assert xpub is not None
        xpub.getsockopt(zmq.EVENTS)  # the writer's socket learns of the reads (parked writer)

    @precondition(lambda self: self.at(WRITER_ACTOR, WRITER_TELL_BROKEN)
                  and not self.waiting_with_a_frame())
    @rule()
    def WriterTellBroken(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_TELL_BROKEN, WRITER_TELL_BROKEN)
        assert self.wedged is not None and self.wedged.poll(WAIT_MS), "BROKEN was not sent"
        want = f"overflow frame seq {self.failed_seq} could not be queued"
        assert len(self.refusals) == 1 and want in self.refusals[0], self.refusals

    # -- the reader --------------------------------------------------------------------

    def coming(self) -> bool:
        """A message the reader has not asked for has its first chunk published."""
        return len(self.outcome) > self.calls

    def ahead(self) -> bool:
        """The reader waits for a message not published yet (it waits on the ring)."""
        return self.calls > len(self.outcome)

    @precondition(lambda self: self.at(READER, IDLE) and (
        self.coming() or (self.failed_seq < 0 and not self.ahead())))
    @rule()
    def dequeue(self) -> None:
        self.calls += 1
        self._grant(READER, IDLE, data=self._dequeue)

    def _dequeue(self) -> None:
        try:
            obj = self.reader.dequeue()
        except DecodeError as exc:
            assert "refuses to be rebuilt" in str(exc), str(exc)
            self.results.append(("decode", exc.seq))
        except BrokenPeerError as exc:
            assert f"frame seq {self.failed_seq} could not be queued" in str(exc), str(exc)
            self.results.append(("broken",))
        else:
            self.results.append(("ok", encoded(obj)))

    def chunk_there(self) -> bool:
        return len(self.published()) > self.taken()

    @precondition(lambda self: self.at(READER, RING_WAIT) and self.chunk_there())
    @rule()
    def ring_wait(self) -> None:
        """The reader's failed poll returns; with a frame (or BROKEN) on its socket it
        drains the socket now (else its periodic look finds nothing there)."""
        self._grant(READER, RING_WAIT, data=LOOK if self.backlog() else None)

    def waiting_with_a_frame(self) -> bool:
        """The reader waits on the ring with a frame on its socket: the writer sends no
        second one (so that its look drains exactly what the machine knows is there)."""
        return self.at(READER, RING_WAIT) and self.backlog() > 0

    @precondition(lambda self: self.at(READER, READER_TAKE_CHUNK) and self.frame_due())
    @rule()
    def ReaderTakeChunk(self) -> None:
        self._grant(READER, READER_TAKE_CHUNK, READER_TAKE_CHUNK)

    def frame_due(self) -> bool:
        """The reader's next chunk is inline, or its frame (or BROKEN) has been sent:
        taking it never leaves the reader waiting on its socket."""
        nxt = self.published()[self.taken()]
        return nxt.kind == "inline" or nxt.seq in self.frames_sent() or self.told()

    @precondition(lambda self: self.at(READER, READER_STASH))
    @rule()
    def ReaderStash(self) -> None:
        self._grant(READER, READER_STASH, READER_STASH)

    @precondition(lambda self: self.at(READER, READER_RECV_FRAME))
    @rule()
    def ReaderRecvFrame(self) -> None:
        self._grant(READER, READER_RECV_FRAME, READER_RECV_FRAME)

    @precondition(lambda self: self.at(READER, READER_SEE_BROKEN))
    @rule()
    def ReaderSeeBroken(self) -> None:
        self._grant(READER, READER_SEE_BROKEN, READER_SEE_BROKEN)

    @precondition(lambda self: self.at(READER, READER_TOLD))
    @rule()
    def ReaderTold(self) -> None:
        self._grant(READER, READER_TOLD, READER_TOLD)

    # -- the spec's invariants, on what the ends did -----------------------------------

    @invariant()
    def NoOutOfOrderInv(self) -> None:
        """No end ever saw a sequence number or kind it did not expect; the writer
        breaks only where its send failed."""
        assert self.reader.state is not ReaderState.BROKEN, self.reader
        broken = self.writer.state is WriterState.BROKEN
        assert broken == (self.failed_seq >= 0), (self.writer, self.failed_seq)

    @invariant()
    def DeliveredPrefixInv(self) -> None:
        """The reader's results are those of the first messages, in order (sequence
        numbers 0, 1, ...; none used again after the break)."""
        assert sorted(self.outcome) == list(range(len(self.outcome)))
        assert self.failed_seq < 0 or max(self.outcome) == self.failed_seq
        assert len(self.results) <= len(self.outcome)

    @invariant()
    def OutcomeInv(self) -> None:
        """Each result is what the writer did with that message: the object (taken
        from the stash or the socket), DecodeError for one that failed to unpickle,
        BrokenPeerError for the one whose frame send failed."""
        for seq, got in enumerate(self.results):
            want = self.outcome[seq]
            assert got == (("decode", seq) if want == ("decode",) else want), (seq, got, want)

    # -- teardown: run both ends to the end --------------------------------------------

    def _step(self) -> None:
        """Grant one step that makes progress (the writer's first)."""
        w, r = self.sched.actors[WRITER_ACTOR].pending, self.sched.actors[READER].pending
        writer_rules = {WRITER_PUBLISH_CHUNK: self.WriterPublishChunk,
                        WRITER_TELL_BROKEN: self.WriterTellBroken}
        reader_rules = {READER_TAKE_CHUNK: self.ReaderTakeChunk, READER_STASH: self.ReaderStash,
                        READER_RECV_FRAME: self.ReaderRecvFrame,
                        READER_SEE_BROKEN: self.ReaderSeeBroken, READER_TOLD: self.ReaderTold}
        if self.waiting_with_a_frame():
            self.ring_wait()
        elif w == (WRITER_SEND_LOCAL_FRAME,):
            (self.WriterSendLocalFrame if self.room else self.WriterSendFails)()
        elif w and w != (IDLE,):
            writer_rules[w[0]]()
        elif r == (RING_WAIT,) and self.chunk_there():
            self.ring_wait()
        elif r and r not in ((IDLE,), (RING_WAIT,)):
            reader_rules[r[0]]()
        elif self.ahead():  # the reader waits for one more message: send it
            assert self.at(WRITER_ACTOR, IDLE) and self.failed_seq < 0, "both ends stuck"
            self.enqueue(b"last", True)
        else:
            assert self.at(READER, IDLE) and self.coming(), "both ends stuck"
            self.dequeue()

    def teardown(self) -> None:
        try:
            if self.threads:
                while not (self.at(WRITER_ACTOR, IDLE) and self.at(READER, IDLE)
                           and self.calls == len(self.outcome)):
                    self._step()
                    self.OutcomeInv()
                assert len(self.results) == len(self.outcome)
                if self.told():  # broken for good: the next dequeue raises at once
                    self.calls += 1
                    self._grant(READER, IDLE, data=self._dequeue)
                    assert self.results[-1] == ("broken",) and self.at(READER, IDLE)
                if self.wedged is not None:
                    self._unwedge()  # so that close() has room for SHUTDOWN
        finally:
            self.sched.stop()  # unwinds the parked
            if self.threads:
                self.reader.shutdown()  # a waiting reader is cancelled
                self.threads[1].join(HANDOFF_TIMEOUT)
            self.cleanup.close()  # the gate, the reader, the wedged subscriber
            if self.threads:
                self.threads[0].join(HANDOFF_TIMEOUT)
            self.writer.close()
            hung = [t.name for t in self.threads if t.is_alive()]
            assert not hung, f"still running after teardown: {hung}"


#: What a run must reach at least: about half the least of 9 random runs.
FLOORS = {
    WRITER_PUBLISH_CHUNK: 300, WRITER_SEND_LOCAL_FRAME: 100, WRITER_SEND_FAILS: 12,
    WRITER_TELL_BROKEN: 12, READER_TAKE_CHUNK: 300, READER_STASH: 12, READER_RECV_FRAME: 100,
    READER_SEE_BROKEN: 12, READER_TOLD: 12, "frame taken from the stash": 12,
    "writer waits on a full ring": 10, "enqueue refused after the break": 300,
}

if TYPE_CHECKING:  # hypothesis builds the class on access (an untyped descriptor)
    _OverflowStepCase = unittest.TestCase
else:
    _OverflowStepCase = OverflowStepMachine.TestCase


class TestOverflowStepMachine(_OverflowStepCase):
    settings = _settings(100, 50)

    @classmethod
    def tearDownClass(cls) -> None:
        """The machine's own end: its floors, checked where it ran (never skipped)."""
        super().tearDownClass()
        _check_floors("TestOverflowStepMachine", OverflowStepMachine.fired, FLOORS)


del _OverflowStepCase  # a TestCase bound at module level would be collected and run too
