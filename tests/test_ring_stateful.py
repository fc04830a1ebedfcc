"""The real ShmRingBuffer, interleaved step by step, checked against the spec's invariants.

``RingMachine`` has one hypothesis rule per action of ``spec/ring/RingBuffer.tla``
(the names in :mod:`verifiedring.steps`). The writer and each reader run the
real cursors (``with writer.acquire_write()`` / ``with reader.acquire_read()``)
in their own threads; a :class:`~verifiedring.testing.scheduler.Scheduler`
installed as their :class:`~verifiedring.steps.StepObserver` parks every thread in ``before_step``
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

A writer poll step is a rule only when it lets the writer go on: a failed poll
stores nothing and is retried, so it is a stutter and would only eat the
example's step budget (unit tests pin what a failed poll does). So is a
reader's, in a run whose readers never stop spinning; in a run whose readers
spin for no time (``sleepy``, half the runs) it is not: their wait goes to sleep
at once (``spec/sleep/ReaderSleep.tla``: ReaderAnnounceSleep, the
re-check, ReaderBlock, ReaderEndSleep; the writer's WriterCheckSleep,
WriterClearSleep, WriterWake after every publish). A ReaderBlock granted while
the reader's sleep word is 1 really blocks in the futex, so the rule does not
wait for it; the WriterWake for that reader then waits until it parks again.
``no_lost_wakeup`` checks ReaderSleep.tla's NoLostWakeupInv on the real ring. ``test_ring_machine``
counts what every run reached -- each action, publishes after an abort, reader
raises, a second lap of every chunk -- and asserts a floor for each.

Every step is recorded (actor, action, chunk, read-flag index, flag bytes
before and after) and the recent trace is part of every failure message.
"""

from __future__ import annotations

import math
import struct
import threading
import time
from collections import Counter
from functools import partial

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from verifiedring import ShmRingBuffer
from verifiedring.ring import ReaderCursor, WriterCursor
from verifiedring.shm import SharedSegment
from verifiedring.steps import (
    READER_ANNOUNCE_SLEEP,
    READER_BLOCK,
    READER_END_SLEEP,
    READER_EXIT_CUT,
    READER_POLL_READ_FLAG,
    READER_POLL_WRITTEN,
    READER_READ_PAYLOAD,
    READER_RELEASE,
    WRITER_ABORT,
    WRITER_ACTOR,
    WRITER_CHECK_SLEEP,
    WRITER_CLEAR_READ_FLAG,
    WRITER_CLEAR_SLEEP,
    WRITER_CLEAR_WRITTEN,
    WRITER_EXIT_CUT,
    WRITER_FILL_PAYLOAD,
    WRITER_POLL_READ_FLAG,
    WRITER_POLL_WRITTEN,
    WRITER_PUBLISH,
    WRITER_WAKE,
    reader_actor,
)
from verifiedring.testing.probe import FlagProbe, RecordingObserver
from verifiedring.testing.scheduler import HANDOFF_TIMEOUT, Actor, Scheduler
from verifiedring.waiting import SLEEP_KIND, futex_wake

#: How a reader's lease ends after ReaderReadPayload, in turn.
PAYLOAD_ENDINGS = ("exit", "raise", "cut")
SLEEPS = SLEEP_KIND == "futex"  # elsewhere readers sleep, doubling: no sleep steps
WORD = struct.Struct("=I")  # a sleep word (layout.py)

HEADER = struct.Struct("<H")  # payload length
MAX_PAYLOAD = 12
CHUNK_BYTES = HEADER.size + MAX_PAYLOAD
TRACE_TAIL = 80  # steps of trace shown in a failure message

# The writer's with-body, after storing the payload, waits for one of these.
AFTER_FILL = (WRITER_ABORT, WRITER_CLEAR_READ_FLAG, WRITER_EXIT_CUT)
# An actor parked at one of these is polling (its chunk's flags decide what comes next).
WRITER_POLLS = ((WRITER_POLL_WRITTEN,), (WRITER_POLL_READ_FLAG,))
READER_POLLS = ((READER_POLL_READ_FLAG,), (READER_POLL_WRITTEN,))


#: What the runs reached: granted actions, and "publish after abort", "reader raised",
#: "second lap of chunk c" (a publish into a chunk that held a message).
REACHED: Counter[str] = Counter()


class _BodyRaised(Exception):
    """The with-body raising on purpose (WriterAbort, a reader's failing read)."""


def _writer_body(sched: Scheduler, cursor: WriterCursor) -> None:
    """One `with acquire_write()` of the writer thread, spelled out: its exit is the
    lease's ``__exit__`` (a normal one, or one after the body raised) or none at all
    (WriterExitCut: cut at its entry, the lease dies holding the chunk)."""
    lease = cursor.acquire_write()
    buf = lease.__enter__()
    payload = sched.actors[WRITER_ACTOR].data
    assert isinstance(payload, bytes)
    buf[: HEADER.size] = HEADER.pack(len(payload))
    buf[HEADER.size : HEADER.size + len(payload)] = payload
    try:
        action, scribble = sched.park(WRITER_ACTOR, AFTER_FILL, cursor.index)
    except BaseException as exc:  # unwound at teardown: the with-statement's exit
        lease.__exit__(type(exc), exc, None)
        raise
    if action == WRITER_ABORT:
        assert isinstance(scribble, bytes)
        buf[: len(scribble)] = scribble  # a partial store, then raise
    del buf
    if action == WRITER_EXIT_CUT:
        del lease
    elif action == WRITER_ABORT:
        lease.__exit__(_BodyRaised, _BodyRaised(), None)
    else:
        lease.__exit__(None, None, None)


def _reader_body(sched: Scheduler, cursor: ReaderCursor) -> None:
    """One `with acquire_read()` of a reader thread, spelled out: the body may raise
    (``"raise"``), and its exit may be cut at its entry (``"cut"``: ReaderExitCut)."""
    a = sched.actors[cursor.actor]
    lease = cursor.acquire_read()
    buf = lease.__enter__()
    (n,) = HEADER.unpack_from(buf)
    a.delivered.append(bytes(buf[HEADER.size : HEADER.size + n]))
    del buf
    if a.data == "cut":
        del lease
    elif a.data == "raise":
        lease.__exit__(_BodyRaised, _BodyRaised(), None)
    else:
        lease.__exit__(None, None, None)


class RingMachine(RuleBasedStateMachine):
    """One writer and 1..3 readers on a real ring of 1..3 chunks."""

    def __init__(self) -> None:
        super().__init__()
        self.sched: Scheduler | None = None
        self.rings: list[ShmRingBuffer] = []
        self.probe: FlagProbe | None = None
        self.threads: list[threading.Thread] = []
        self.published: list[bytes] = []  # payloads, in WriterPublish order
        self.payload_reads = 0  # ReaderReadPayload steps so far: whose ending is next
        self.filling: bytes = b""  # the payload of the write in progress
        self.chunk_msg: list[int | None] = []  # per chunk: index of its published message
        self.aborted = False  # the last write attempt aborted
        self.used_chunks: set[int] = set()  # chunks that have held a published message
        self.words: SharedSegment | None = None  # a mapping to read the sleep words from
        self.blocked: set[int] = set()  # readers granted a ReaderBlock on word 1
        self.to_wake: set[int] = set()  # readers the writer's last check saw asleep
        self.sleepy = False  # readers sleep after one failed poll (else they spin)

    # -- set-up and teardown ----------------------------------------------------------

    @initialize(n_reader=st.integers(1, 3), max_chunks=st.integers(1, 3), sleepy=st.booleans())
    def start(self, n_reader: int, max_chunks: int, sleepy: bool) -> None:
        ring = ShmRingBuffer(n_reader, CHUNK_BYTES, max_chunks)
        self.rings.append(ring)
        readers_ring = ShmRingBuffer.attach(ring.handle())
        self.rings.append(readers_ring)
        self.probe = FlagProbe(ring)
        self.sched = sched = Scheduler(RecordingObserver(self.probe))
        self.n_reader = n_reader
        self.chunk_msg = [None] * max_chunks
        writer = ring.writer(observer=sched, log_interval=1e9)
        self.words = SharedSegment.attach(ring.name, ring.layout.total_bytes)
        self.layout = ring.layout
        self.addresses = readers_ring.sleep_addresses
        readers = [readers_ring.reader(k, sched, log_interval=1e9) for k in range(n_reader)]
        self.sleepy = sleepy and SLEEPS
        for r in readers:
            # sleepy: a failed poll goes to sleep at once; else the wait spins for ever
            r.pace.longest = 0.0 if self.sleepy else math.inf
            r.max_block = 1e6  # only a WriterWake (or teardown) ends a block
        self.threads.append(sched.start_actor(WRITER_ACTOR, partial(_writer_body, sched, writer)))
        for r in readers:
            self.threads.append(sched.start_actor(r.actor, partial(_reader_body, sched, r)))
        self.tids = [t.native_id for t in self.threads[1:]]  # reader k's thread id
        for name in sched.actors:
            self._check(sched.wait_parked(name))

    def teardown(self) -> None:
        hung = []
        try:
            if self.sched is not None:
                self.sched.stop()
            for address in getattr(self, "addresses", ()):
                futex_wake(address)  # a reader blocked in the futex unwinds (Stopped)
            for t in self.threads:
                t.join(HANDOFF_TIMEOUT)
                if t.is_alive():
                    hung.append(t.name)
        finally:
            if self.probe is not None:
                self.probe.close()
            if self.words is not None:
                self.words.close()
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
        assert self.sched.recorder is not None
        return self.sched.recorder.format(last=TRACE_TAIL)

    def fail(self, msg: str) -> None:
        raise AssertionError(f"{msg}\n-- step trace (oldest first) --\n{self.trace()}")

    def _check(self, problem: str | None) -> None:
        if problem is not None:
            self.fail(problem)

    def _grant(self, actor: str, action: str, data: object = None) -> None:
        assert self.sched is not None
        REACHED[action] += 1
        self._check(self.sched.grant(actor, action, data))

    def _flags(self, chunk: int) -> tuple[int, ...]:
        assert self.probe is not None
        return self.probe.flags(chunk)

    def asleep(self, k: int) -> int:
        """Reader ``k``'s sleep word, as the segment holds it now."""
        assert self.words is not None
        (word,) = WORD.unpack_from(self.words.buf, self.layout.sleep_offset(k))
        return int(word)

    def wait_in_futex(self, k: int) -> None:
        """Wait until reader ``k``'s thread is blocked in the futex wait on its word (the
        kernel names its syscall and address), so what runs next cannot race it."""
        path = f"/proc/self/task/{self.tids[k]}/syscall"
        address = hex(self.addresses[k])
        end = time.monotonic() + HANDOFF_TIMEOUT
        while time.monotonic() < end:
            with open(path) as f:
                if f.read().split()[1:3] == [address, "0x0"]:  # FUTEX_WAIT on the word
                    return
            time.sleep(1e-4)
        self.fail(f"reader {k} was not in its futex wait {HANDOFF_TIMEOUT} s after ReaderBlock")

    def writer_poll_proceeds(self) -> bool:
        """The writer's next read-flag load finds 1 (a 0 fails the poll: a stutter)."""
        if not self.writer_at(WRITER_POLL_READ_FLAG):
            return False
        w = self.writer
        return w.flag is not None and self._flags(w.chunk)[1 + w.flag] == 1

    def readers_proceeding(self, action: str) -> list[int]:
        """Readers at ``action`` whose load lets them go on (own flag 0, written 1)."""
        out = []
        for k in self.readers_at(action):
            flags = self._flags(self.reader(k).chunk)
            if (flags[1 + k] == 0) if action == READER_POLL_READ_FLAG else (flags[0] == 1):
                out.append(k)
        return out

    # -- writer rules -----------------------------------------------------------------

    @precondition(lambda self: self.writer_at(WRITER_POLL_WRITTEN))
    @rule()
    def WriterPollWritten(self) -> None:  # rule names = spec action names
        self._grant(WRITER_ACTOR, WRITER_POLL_WRITTEN)

    @precondition(lambda self: self.writer_poll_proceeds())
    @rule()
    def WriterPollReadFlag(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_POLL_READ_FLAG)

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
        self.aborted = True
        self._grant(WRITER_ACTOR, WRITER_ABORT, scribble)

    @precondition(lambda self: self.writer_at(WRITER_EXIT_CUT))
    @rule()
    def WriterExitCut(self) -> None:
        self.aborted = True
        self._grant(WRITER_ACTOR, WRITER_EXIT_CUT)

    @precondition(lambda self: self.writer_at(WRITER_CLEAR_READ_FLAG))
    @rule()
    def WriterClearReadFlag(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_CLEAR_READ_FLAG)

    @precondition(lambda self: self.writer_at(WRITER_PUBLISH))
    @rule()
    def WriterPublish(self) -> None:
        chunk = self.writer.chunk
        self._grant(WRITER_ACTOR, WRITER_PUBLISH)
        if self.aborted:
            REACHED["publish after abort"] += 1
            self.aborted = False
        if chunk in self.used_chunks:
            REACHED[f"second lap of chunk {chunk}"] += 1
        self.used_chunks.add(chunk)
        self.published.append(self.filling)
        self.chunk_msg[chunk] = len(self.published) - 1

    # -- reader rules -----------------------------------------------------------------

    def readers_polling(self, action: str) -> list[int]:
        """Readers at ``action``: all of them where a failed poll goes to sleep, else
        those whose load lets them go on (a failed poll would be a stutter)."""
        return self.readers_at(action) if self.sleepy else self.readers_proceeding(action)

    @precondition(lambda self: self.readers_polling(READER_POLL_READ_FLAG))
    @rule(data=st.data())
    def ReaderPollReadFlag(self, data: st.DataObject) -> None:
        k = data.draw(
            st.sampled_from(self.readers_polling(READER_POLL_READ_FLAG)), label="reader"
        )
        self._grant(reader_actor(k), READER_POLL_READ_FLAG)

    @precondition(lambda self: self.readers_polling(READER_POLL_WRITTEN))
    @rule(data=st.data())
    def ReaderPollWritten(self, data: st.DataObject) -> None:
        k = data.draw(
            st.sampled_from(self.readers_polling(READER_POLL_WRITTEN)), label="reader"
        )
        self._grant(reader_actor(k), READER_POLL_WRITTEN)

    @precondition(lambda self: self.readers_at(READER_READ_PAYLOAD))
    @rule(data=st.data())
    def ReaderReadPayload(self, data: st.DataObject) -> None:
        """A reader reads its payload, and its lease ends in turn (within the example,
        so from the draws alone) by a clean exit, a raise in the body or a cut: each
        a third of the reads, not a skewed draw that a loaded run left under a floor."""
        k = data.draw(st.sampled_from(self.readers_at(READER_READ_PAYLOAD)), label="reader")
        ending = PAYLOAD_ENDINGS[self.payload_reads % len(PAYLOAD_ENDINGS)]
        self.payload_reads += 1
        if ending == "raise":
            REACHED["reader raised"] += 1
        self._grant(reader_actor(k), READER_READ_PAYLOAD, ending)

    @precondition(lambda self: self.readers_at(READER_RELEASE))
    @rule(data=st.data())
    def ReaderRelease(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from(self.readers_at(READER_RELEASE)), label="reader")
        self._grant(reader_actor(k), READER_RELEASE)

    @precondition(lambda self: self.readers_at(READER_EXIT_CUT))
    @rule(data=st.data())
    def ReaderExitCut(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from(self.readers_at(READER_EXIT_CUT)), label="reader")
        self._grant(reader_actor(k), READER_EXIT_CUT)

    # -- sleep rules (spec/sleep/ReaderSleep.tla) -------------------------------------------

    @precondition(lambda self: self.readers_at(READER_ANNOUNCE_SLEEP))
    @rule(data=st.data())
    def ReaderAnnounceSleep(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from(self.readers_at(READER_ANNOUNCE_SLEEP)), label="reader")
        self._grant(reader_actor(k), READER_ANNOUNCE_SLEEP)

    @precondition(lambda self: self.readers_at(READER_BLOCK))
    @rule(data=st.data())
    def ReaderBlock(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from(self.readers_at(READER_BLOCK)), label="reader")
        if self.asleep(k) == 1:  # the futex wait blocks until a WriterWake for k
            assert self.sched is not None
            REACHED[READER_BLOCK] += 1
            REACHED["reader blocked"] += 1
            self.blocked.add(k)
            self._check(self.sched.grant(reader_actor(k), READER_BLOCK, wait=False))
            self.wait_in_futex(k)
        else:  # the writer cleared the word: the wait returns at once
            self._grant(reader_actor(k), READER_BLOCK)

    @precondition(lambda self: self.readers_at(READER_END_SLEEP))
    @rule(data=st.data())
    def ReaderEndSleep(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from(self.readers_at(READER_END_SLEEP)), label="reader")
        self._grant(reader_actor(k), READER_END_SLEEP)

    @precondition(lambda self: self.writer_at(WRITER_CHECK_SLEEP))
    @rule()
    def WriterCheckSleep(self) -> None:
        self.to_wake = {k for k in range(self.n_reader) if self.asleep(k) == 1}
        self._grant(WRITER_ACTOR, WRITER_CHECK_SLEEP)

    @precondition(lambda self: self.writer_at(WRITER_CLEAR_SLEEP))
    @rule()
    def WriterClearSleep(self) -> None:
        self._grant(WRITER_ACTOR, WRITER_CLEAR_SLEEP)

    @precondition(lambda self: self.writer_at(WRITER_WAKE))
    @rule()
    def WriterWake(self) -> None:
        k = self.writer.flag
        assert k is not None
        self.to_wake.discard(k)
        self._grant(WRITER_ACTOR, WRITER_WAKE)
        if k in self.blocked:  # it runs again: wait until it parks at ReaderEndSleep
            assert self.sched is not None
            self.blocked.discard(k)
            REACHED["blocked reader woken"] += 1
            self._check(self.sched.wait_parked(reader_actor(k)))
            if self.reader(k).pending != (READER_END_SLEEP,):
                self.fail(f"reader {k} woke at {self.reader(k).pending}, not at ReaderEndSleep")

    # -- invariants (spec/ring/RingBuffer.tla, "safety") ------------------------------------

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
        """NoOverwriteUnreadInv: once the writer's polls let it in, every reader has
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
    def no_lost_wakeup(self) -> None:
        """NoLostWakeupInv (ReaderSleep.tla): a reader blocked while its next chunk is
        published is about to be woken: the writer's check is still to come, or saw it."""
        if self.sched is None:
            return
        for k in self.blocked:
            flags = self._flags(self.reader(k).chunk)
            ready = flags[0] == 1 and flags[1 + k] == 0
            if ready and self.writer.pending != (WRITER_CHECK_SLEEP,) and k not in self.to_wake:
                self.fail(
                    f"NoLostWakeupInv: reader {k} is blocked on its sleep word while chunk "
                    f"{self.reader(k).chunk} is published for it (flags {flags}), and the "
                    f"writer (at {self.writer.pending}) will not wake it"
                )

    @invariant()
    def some_actor_can_progress(self) -> None:
        """No deadlock: some poll would succeed or some actor is past its poll."""
        if self.sched is None or self.probe is None:
            return
        w = self.writer
        if w.pending not in WRITER_POLLS:
            return
        wf = self.probe.flags(w.chunk)
        if wf[0] == 0 or all(wf[1:]):
            return
        for k in range(self.n_reader):
            r = self.reader(k)
            if r.pending not in READER_POLLS:
                return
            rf = self.probe.flags(r.chunk)
            if rf[0] == 1 and rf[1 + k] == 0:
                return
        self.fail("deadlock: no poll can succeed and every actor is polling")


SETTINGS = settings(
    max_examples=250,
    stateful_step_count=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
#: The least each run must reach (250 derandomized examples of 80 steps, half sleepy).
FLOORS = {
    **dict.fromkeys(
        (WRITER_POLL_WRITTEN, WRITER_POLL_READ_FLAG, WRITER_CLEAR_WRITTEN, WRITER_FILL_PAYLOAD,
         WRITER_CLEAR_READ_FLAG, WRITER_PUBLISH, READER_POLL_READ_FLAG, READER_POLL_WRITTEN,
         READER_READ_PAYLOAD, READER_RELEASE),
        150,
    ),
    WRITER_ABORT: 100,
    WRITER_EXIT_CUT: 150,
    READER_EXIT_CUT: 30,
    "publish after abort": 30,
    "reader raised": 30,
    "second lap of chunk 0": 30,
    "second lap of chunk 1": 8,
    "second lap of chunk 2": 1,
    **(
        {
            # what a busy 2-core machine reached at least (timing decides how many
            # waits end in a real block), with a margin
            **dict.fromkeys((READER_ANNOUNCE_SLEEP, WRITER_CHECK_SLEEP), 100),
            READER_BLOCK: 60,
            READER_END_SLEEP: 40,
            WRITER_CLEAR_SLEEP: 40,
            WRITER_WAKE: 40,
            "reader blocked": 60,
            "blocked reader woken": 30,
        }
        if SLEEPS
        else {}
    ),
}


def test_ring_machine() -> None:
    REACHED.clear()
    run_state_machine_as_test(RingMachine, settings=SETTINGS)
    print("ring machine reached:", dict(sorted(REACHED.items())))
    short = {k: (REACHED[k], floor) for k, floor in FLOORS.items() if REACHED[k] < floor}
    assert not short, f"reached less than the floor (got, floor): {short}"
