"""The real ShmRingBuffer, interleaved step by step, checked against the spec's invariants.

``RingMachine`` has one hypothesis rule per action of ``spec/RingBuffer.tla``
(the names in :mod:`verifiedring.steps`). The writer and each reader run the
real cursors (``with writer.acquire_write()`` / ``with reader.acquire_read()``)
in their own threads; a :class:`Scheduler` installed as their
:class:`~verifiedring.steps.StepObserver` parks every thread in ``before_step``
until a rule grants it that step. A rule's precondition is the spec's enabling
condition, "this actor's next step is this action"; the rule grants exactly
one step to one actor and waits until the actor parks at its next step. So
at most one actor runs at a time, hypothesis chooses the interleaving, and
nothing sleeps.

The with-bodies are part of the steps: the writer's body (``WriterFillPayload``)
stores a length-prefixed payload drawn by the rule, then parks until the next
rule decides between ``WriterAbort`` (the body scribbles over part of the
chunk and raises) and ``WriterClearReadFlag`` (the body returns normally). A
reader's body (``ReaderReadPayload``) loads the message and may raise, in
which case the message still counts as consumed and the chunk must still be
released.

Every step is recorded (actor, action, chunk, read-flag index, flag bytes
before and after) and the recent trace is part of every failure message.
"""

from __future__ import annotations

import struct
import threading
import traceback
from dataclasses import dataclass, field

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from ring_probe import FlagProbe, RecordingObserver

from verifiedring import ShmRingBuffer
from verifiedring.ring import ReaderCursor, WriterCursor
from verifiedring.steps import (
    READER_POLL,
    READER_READ_PAYLOAD,
    READER_RELEASE,
    WRITER_ABORT,
    WRITER_ACTOR,
    WRITER_CLEAR_READ_FLAG,
    WRITER_CLEAR_WRITTEN,
    WRITER_FILL_PAYLOAD,
    WRITER_POLL,
    WRITER_PUBLISH,
    reader_actor,
)

HEADER = struct.Struct("<H")  # payload length
MAX_PAYLOAD = 12
CHUNK_BYTES = HEADER.size + MAX_PAYLOAD
HANDOFF_TIMEOUT = 10.0  # seconds; a hand-off slower than this is a hang
TRACE_TAIL = 80  # steps of trace shown in a failure message

# The writer's with-body, after storing the payload, waits for one of these.
AFTER_FILL = (WRITER_ABORT, WRITER_CLEAR_READ_FLAG)


class _Stop(BaseException):
    """Raised inside an actor thread to unwind it at teardown."""


class _BodyRaised(Exception):
    """The with-body raising on purpose (WriterAbort, a reader's failing read)."""


@dataclass
class Actor:
    """One thread's position in the protocol, as the scheduler sees it."""

    name: str
    pending: tuple[str, ...] = ()  # the steps it may be granted next; () while it runs
    chunk: int = -1  # the chunk of its pending step
    grant: tuple[str, object] | None = None  # set by a rule, taken by the thread
    data: object = None  # what the last grant carried for the with-body
    pregranted: str | None = None  # a step already chosen by the rule that ran the body
    done: bool = False
    error: str | None = None
    delivered: list[bytes] = field(default_factory=list)  # reader: payloads consumed


class Scheduler:
    """A StepObserver that runs one actor at a time: every step waits for a grant."""

    def __init__(self, recorder: RecordingObserver) -> None:
        self.recorder = recorder
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
                a.data = self._park(a, (action,), chunk)[1]
        self.recorder.before_step(actor, action, chunk, reader)

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        self.recorder.after_step(actor, action, chunk, reader)

    # -- actor side -------------------------------------------------------------------

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
            lambda: a.grant is not None or self._stopping, HANDOFF_TIMEOUT
        )
        if self._stopping:
            raise _Stop
        if not granted or a.grant is None:
            a.error = f"{a.name} waited {HANDOFF_TIMEOUT} s at {steps} for a grant"
            raise _Stop
        action, data = a.grant
        a.grant = None
        return action, data

    def finished(self, actor: str, error: str | None) -> None:
        a = self.actors[actor]
        with self._cond:
            a.done, a.pending = True, ()
            a.error = a.error or error
            self._cond.notify_all()

    # -- rule side (the hypothesis thread) -------------------------------------------

    def grant(self, actor: str, action: str, data: object = None) -> str | None:
        """Let ``actor`` run ``action``; wait until it parks at its next step.

        Returns None, or what went wrong (the actor hung or died)."""
        a = self.actors[actor]
        with self._cond:
            if action not in a.pending:
                return f"{actor} is at {a.pending}, not at {action}"
            a.pending, a.grant = (), (action, data)
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: bool(a.pending) or a.done, HANDOFF_TIMEOUT):
                return f"{actor} did not reach its next step within {HANDOFF_TIMEOUT} s"
            if a.done:
                return f"{actor} stopped: {a.error or 'its thread ended'}"
        return None

    def wait_parked(self, actor: str) -> str | None:
        a = self.actors[actor]
        with self._cond:
            if not self._cond.wait_for(lambda: bool(a.pending) or a.done, HANDOFF_TIMEOUT):
                return f"{actor} did not reach its first step within {HANDOFF_TIMEOUT} s"
        return a.error

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()


def _run_writer(sched: Scheduler, cursor: WriterCursor) -> None:
    """The writer thread: one `with acquire_write()` after another."""
    error = None
    try:
        while True:
            try:
                with cursor.acquire_write() as buf:
                    payload = sched.actors[WRITER_ACTOR].data
                    assert isinstance(payload, bytes)
                    buf[: HEADER.size] = HEADER.pack(len(payload))
                    buf[HEADER.size : HEADER.size + len(payload)] = payload
                    action, scribble = sched.park(WRITER_ACTOR, AFTER_FILL, cursor.index)
                    if action == WRITER_ABORT:
                        assert isinstance(scribble, bytes)
                        buf[: len(scribble)] = scribble  # a partial store, then raise
                        raise _BodyRaised
            except _BodyRaised:
                pass
    except _Stop:
        pass
    except BaseException:
        error = traceback.format_exc()
    finally:
        sched.finished(WRITER_ACTOR, error)


def _run_reader(sched: Scheduler, cursor: ReaderCursor) -> None:
    """A reader thread: one `with acquire_read()` after another."""
    a = sched.actors[cursor.actor]
    error = None
    try:
        while True:
            try:
                with cursor.acquire_read() as buf:
                    (n,) = HEADER.unpack_from(buf)
                    a.delivered.append(bytes(buf[HEADER.size : HEADER.size + n]))
                    if a.data:
                        raise _BodyRaised
            except _BodyRaised:
                pass
    except _Stop:
        pass
    except BaseException:
        error = traceback.format_exc()
    finally:
        sched.finished(cursor.actor, error)


class RingMachine(RuleBasedStateMachine):
    """One writer and 1..3 readers on a real ring of 1..3 chunks."""

    def __init__(self) -> None:
        super().__init__()
        self.sched: Scheduler | None = None
        self.rings: list[ShmRingBuffer] = []
        self.probe: FlagProbe | None = None
        self.threads: list[threading.Thread] = []
        self.published: list[bytes] = []  # payloads, in WriterPublish order
        self.filling: bytes = b""  # the payload of the write in progress
        self.chunk_msg: list[int | None] = []  # per chunk: index of its published message

    # -- set-up and teardown ----------------------------------------------------------

    @initialize(n_reader=st.integers(1, 3), max_chunks=st.integers(1, 3))
    def start(self, n_reader: int, max_chunks: int) -> None:
        ring = ShmRingBuffer(n_reader, CHUNK_BYTES, max_chunks)
        self.rings.append(ring)
        readers_ring = ShmRingBuffer.attach(ring.handle())
        self.rings.append(readers_ring)
        self.probe = FlagProbe(ring)
        self.sched = sched = Scheduler(RecordingObserver(self.probe))
        self.n_reader = n_reader
        self.chunk_msg = [None] * max_chunks
        writer = ring.writer(observer=sched, log_interval=1e9)
        readers = [readers_ring.reader(k, sched, log_interval=1e9) for k in range(n_reader)]
        sched.actors[WRITER_ACTOR] = Actor(WRITER_ACTOR)
        self.threads.append(threading.Thread(target=_run_writer, args=(sched, writer)))
        for r in readers:
            sched.actors[r.actor] = Actor(r.actor)
            self.threads.append(threading.Thread(target=_run_reader, args=(sched, r)))
        for t in self.threads:
            t.daemon = True
            t.start()
        for name in sched.actors:
            self._check(sched.wait_parked(name))

    def teardown(self) -> None:
        hung = []
        try:
            if self.sched is not None:
                self.sched.stop()
            for t in self.threads:
                t.join(HANDOFF_TIMEOUT)
                if t.is_alive():
                    hung.append(t.name)
        finally:
            if self.probe is not None:
                self.probe.close()
            for ring in reversed(self.rings):
                ring.close()
        assert not hung, f"actor threads still running {HANDOFF_TIMEOUT} s after teardown: {hung}"

    # -- helpers ----------------------------------------------------------------------

    @property
    def writer(self) -> Actor:
        assert self.sched is not None
        return self.sched.actors[WRITER_ACTOR]

    def reader(self, k: int) -> Actor:
        assert self.sched is not None
        return self.sched.actors[reader_actor(k)]

    def writer_at(self, action: str) -> bool:
        return self.sched is not None and action in self.writer.pending

    def readers_at(self, action: str) -> list[int]:
        if self.sched is None:
            return []
        return [k for k in range(self.n_reader) if action in self.reader(k).pending]

    def trace(self) -> str:
        assert self.sched is not None
        return self.sched.recorder.format(last=TRACE_TAIL)

    def fail(self, msg: str) -> None:
        raise AssertionError(f"{msg}\n-- step trace (oldest first) --\n{self.trace()}")

    def _check(self, problem: str | None) -> None:
        if problem is not None:
            self.fail(problem)

    def _grant(self, actor: str, action: str, data: object = None) -> None:
        assert self.sched is not None
        self._check(self.sched.grant(actor, action, data))

    # -- writer rules -----------------------------------------------------------------

    @precondition(lambda self: self.writer_at(WRITER_POLL))
    @rule()
    def WriterPoll(self) -> None:  # rule names = spec action names
        self._grant(WRITER_ACTOR, WRITER_POLL)

    @precondition(lambda self: self.writer_at(WRITER_CLEAR_WRITTEN))
    @rule()
    def WriterClearWritten(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_CLEAR_WRITTEN)

    @precondition(lambda self: self.writer_at(WRITER_FILL_PAYLOAD))
    @rule(payload=st.binary(max_size=MAX_PAYLOAD))
    def WriterFillPayload(self, payload: bytes) -> None:
        self.chunk_msg[self.writer.chunk] = None  # its old message is being overwritten
        self.filling = payload
        self._grant(WRITER_ACTOR, WRITER_FILL_PAYLOAD, payload)

    @precondition(lambda self: self.writer_at(WRITER_ABORT))
    @rule(scribble=st.binary(max_size=CHUNK_BYTES))
    def WriterAbort(self, scribble: bytes) -> None:
        self._grant(WRITER_ACTOR, WRITER_ABORT, scribble)

    @precondition(lambda self: self.writer_at(WRITER_CLEAR_READ_FLAG))
    @rule()
    def WriterClearReadFlag(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_CLEAR_READ_FLAG)

    @precondition(lambda self: self.writer_at(WRITER_PUBLISH))
    @rule()
    def WriterPublish(self) -> None:
        chunk = self.writer.chunk
        self._grant(WRITER_ACTOR, WRITER_PUBLISH)
        self.published.append(self.filling)
        self.chunk_msg[chunk] = len(self.published) - 1

    # -- reader rules -----------------------------------------------------------------

    @precondition(lambda self: self.readers_at(READER_POLL))
    @rule(data=st.data())
    def ReaderPoll(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from(self.readers_at(READER_POLL)), label="reader")
        self._grant(reader_actor(k), READER_POLL)

    @precondition(lambda self: self.readers_at(READER_READ_PAYLOAD))
    @rule(data=st.data(), raise_in_body=st.booleans())
    def ReaderReadPayload(self, data: st.DataObject, raise_in_body: bool) -> None:
        k = data.draw(st.sampled_from(self.readers_at(READER_READ_PAYLOAD)), label="reader")
        self._grant(reader_actor(k), READER_READ_PAYLOAD, raise_in_body)

    @precondition(lambda self: self.readers_at(READER_RELEASE))
    @rule(data=st.data())
    def ReaderRelease(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from(self.readers_at(READER_RELEASE)), label="reader")
        self._grant(reader_actor(k), READER_RELEASE)

    # -- invariants (spec/RingBuffer.tla, "safety") ------------------------------------

    @invariant()
    def type_ok(self) -> None:
        """TypeOK: every flag byte is 0 or 1."""
        if self.probe is None:
            return
        for c, flags in enumerate(self.probe.all_flags()):
            if any(f not in (0, 1) for f in flags):
                self.fail(f"TypeOK: chunk {c} has flag bytes {flags}, expected each 0 or 1")

    @invariant()
    def delivered_prefix(self) -> None:
        """DeliveredPrefixInv: each reader got exactly the first n published messages."""
        if self.sched is None:
            return
        for k in range(self.n_reader):
            got = self.reader(k).delivered
            want = self.published[: len(got)]
            if got != want:
                self.fail(
                    f"DeliveredPrefixInv: reader {k} consumed {got}, but the first "
                    f"{len(got)} published messages are {want} (all published: {self.published})"
                )

    @invariant()
    def no_torn_read(self) -> None:
        """NoTornReadInv: no reader holds a chunk while the writer stores into it."""
        if self.sched is None:
            return
        w = self.writer
        if not (w.pending == (WRITER_FILL_PAYLOAD,) or w.pending == AFTER_FILL):
            return
        for k in range(self.n_reader):
            r = self.reader(k)
            if r.chunk == w.chunk and r.pending in ((READER_READ_PAYLOAD,), (READER_RELEASE,)):
                self.fail(
                    f"NoTornReadInv: reader {k} holds chunk {r.chunk} (at {r.pending}) "
                    f"while the writer fills it"
                )

    @invariant()
    def no_overwrite_of_unread(self) -> None:
        """NoOverwriteUnreadInv: once WriterPoll let the writer in, every reader has
        read the message the chunk holds."""
        if self.sched is None:
            return
        w = self.writer
        if w.pending not in ((WRITER_CLEAR_WRITTEN,), (WRITER_FILL_PAYLOAD,)):
            return
        msg = self.chunk_msg[w.chunk]
        if msg is None:
            return
        behind = [k for k in range(self.n_reader) if len(self.reader(k).delivered) <= msg]
        if behind:
            self.fail(
                f"NoOverwriteUnreadInv: the writer is about to overwrite chunk {w.chunk}, "
                f"which holds message #{msg}, but readers {behind} have not read it"
            )

    @invariant()
    def some_actor_can_progress(self) -> None:
        """No deadlock: some poll would succeed or some actor is past its poll."""
        if self.sched is None or self.probe is None:
            return
        w = self.writer
        if w.pending != (WRITER_POLL,):
            return
        wf = self.probe.flags(w.chunk)
        if wf[0] == 0 or all(wf[1:]):
            return
        for k in range(self.n_reader):
            r = self.reader(k)
            if r.pending != (READER_POLL,):
                return
            rf = self.probe.flags(r.chunk)
            if rf[0] == 1 and rf[1 + k] == 0:
                return
        self.fail("deadlock: no poll can succeed and every actor is polling")


RingMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRing = RingMachine.TestCase
