"""Trace validation of real multiprocess ring runs: record, then let TLC replay.

A writer and its readers, each in its own spawned process (or thread), install
a :class:`TraceRecorder` as their cursors' :class:`~verifiedring.steps.StepObserver`.
All recorders of one run share a :class:`TraceLog`: a file mapped into every
process, holding one fixed-size record per step, and one lock. A recorder takes
the lock in ``before_step`` and releases it in ``after_step``, after appending
the step's event, so no two traced steps overlap and the log's order is the
order the steps happened in (a linearization of the run). Each event holds the
actor, the step name, the chunk, the read-flag index (writer flag steps), the
chunk's flag bytes after the step and, for the payload steps, the *payload
sequence number*: the first 8 bytes of the chunk (little-endian, signed) after
``WriterFillPayload`` (what the writer stored) and, for ``ReaderReadPayload``,
what the reader's caller reports it loaded (:meth:`TraceRecorder.loaded`; the
chunk's bytes when it reports nothing). A failed poll that exactly repeats the
same actor's previous failed poll, with no step of anyone in between (a waiting
side spinning), is folded into that one (:func:`_failed_poll_cycle` says why the
verdict cannot change). The log has a capacity: once full, recording stops (and
so does the locking); the run goes on.

:func:`validate` writes the events as ``TraceData.tla`` next to copies of
``spec/RingBuffer.tla``, ``TraceRingBuffer.tla`` and ``MCTrace.tla`` and runs
TLC (through :mod:`spec.tlc`, the one driver) to replay them; see
``spec/TraceRingBuffer.tla`` for what the replay requires. The verdict names
the first requirement an event failed and that event.

:func:`verifiedring.testing.trace_runs.record_run` is a traced run of the test
harness (message ``k`` carries ``k`` and a check word derived from it; the
writer's body can raise and retry, readers' bodies can raise after loading),
optionally with a *mutant*: a known bug applied to one side's cursor inside the
traced child processes. ``python -m stress ring --trace`` records a stress run.
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import shutil
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MisuseError
from ..layout import WRITTEN_POSITION, RingLayout
from ..ring import RingHandle
from ..shm import SharedSegment
from ..steps import (
    ALL_STEPS,
    READER_POLL_READ_FLAG,
    READER_POLL_WRITTEN,
    READER_READ_PAYLOAD,
    SLEEP_STEPS,
    WRITER_ABORT,
    WRITER_ACTOR,
    WRITER_FILL_PAYLOAD,
    WRITER_POLL_READ_FLAG,
    reader_actor,
)

#: The spec's sequence number of an event that moves no payload (``NoSeq``).
NO_SEQ = -2
#: A sequence number TLC cannot represent (outside 32-bit signed integers).
OUT_OF_RANGE_SEQ = -3
SEQ = struct.Struct("<q")  # the payload's first 8 bytes, as the recorder reads them
MAX_FLAGS = 8  # flag bytes a record holds: written + up to 7 readers

#: capacity, events recorded, steps not recorded (log full), repeated failed polls folded
_HEADER = struct.Struct("<QQQQ")
_HEADER_SIZE = 32
#: actor (-1 writer, else reader index), action (index in ALL_STEPS), chunk,
#: read-flag index (-1 none), flag bytes used, seq, flag bytes
_RECORD = struct.Struct(f"<bBHbBxxq{MAX_FLAGS}s")
LOCK_TIMEOUT = 30.0  # seconds a step waits for the trace lock before it fails


class TraceError(RuntimeError):
    """The trace could not be recorded (the lock was held too long: a traced
    process died inside a step)."""


@dataclass(frozen=True)
class TraceEvent:
    """One recorded step. ``seq`` is :data:`NO_SEQ` except for the payload steps;
    ``abort`` marks a WriterFillPayload whose caller raised (its writer's next
    event is WriterAbort); ``raised`` a ReaderReadPayload whose caller raised."""

    actor: str
    action: str
    chunk: int
    reader: int | None
    after: tuple[int, ...]
    seq: int = NO_SEQ
    abort: bool = False
    raised: bool = False

    @property
    def rd(self) -> int:
        """The reader index of a reader's event, -1 for the writer's."""
        return -1 if self.actor == WRITER_ACTOR else int(self.actor.removeprefix("reader"))

    def __str__(self) -> str:
        flag = "" if self.reader is None else f" read flag {self.reader}"
        seq = "" if self.seq == NO_SEQ else f" seq {self.seq}"
        extra = " (caller raised)" if self.abort or self.raised else ""
        return (
            f"{self.actor} {self.action} chunk {self.chunk}{flag}{seq}{extra}: flags after "
            f"w={self.after[0]} r={list(self.after[1:])}"
        )


@dataclass
class TraceLog:
    """The shared event log of one traced run: a mapped file and one lock.

    Picklable while spawning, so it travels in a :class:`~.launcher.Task`'s
    arguments. Create it with :meth:`create` (the lock must come from the
    ``spawn`` context), read it with :meth:`events` once the run is over.
    """

    path: str
    capacity: int
    lock: Any = field(repr=False)
    record_size: int = _RECORD.size

    @classmethod
    def create(
        cls, directory: str | os.PathLike[str], capacity: int, record_size: int = _RECORD.size
    ) -> TraceLog:
        """An empty log of ``capacity`` records of ``record_size`` bytes (the ring's
        records by default; the queue's trace has its own)."""
        if capacity < 1:
            raise MisuseError(f"trace capacity must be >= 1 event, got {capacity}")
        path = os.path.join(os.fspath(directory), "trace.bin")
        with open(path, "wb") as f:
            f.truncate(_HEADER_SIZE + capacity * record_size)
            f.seek(0)
            f.write(_HEADER.pack(capacity, 0, 0, 0))
        return cls(path, capacity, mp.get_context("spawn").Lock(), record_size)

    def records(self) -> list[bytes]:
        """The recorded records, in order, as bytes."""
        with open(self.path, "rb") as f:
            data = f.read()
        _, count, _, _ = _HEADER.unpack_from(data, 0)
        size = self.record_size
        return [data[_HEADER_SIZE + n * size : _HEADER_SIZE + (n + 1) * size] for n in range(count)]

    def counts(self) -> tuple[int, int]:
        """(events recorded, steps left unrecorded because the log was full)."""
        return self.header()[1:3]

    def header(self) -> tuple[int, int, int, int]:
        """(capacity, events recorded, steps not recorded, failed-poll events folded)."""
        with open(self.path, "rb") as f:
            return _HEADER.unpack(f.read(_HEADER.size))

    def events(self) -> list[TraceEvent]:
        """The recorded events, in order; ``abort`` set from the writer's next event."""
        raw: list[TraceEvent] = []
        for record in self.records():
            actor, action, chunk, reader, nflags, seq, flags = _RECORD.unpack(record)
            name = ALL_STEPS[action & 0x7F]
            raw.append(
                TraceEvent(
                    WRITER_ACTOR if actor < 0 else reader_actor(actor),
                    name,
                    chunk,
                    None if reader < 0 else reader,
                    tuple(flags[:nflags]),
                    seq,
                    raised=bool(action & 0x80),
                )
            )
        return mark_aborts(raw)


def mark_aborts(events: Sequence[TraceEvent]) -> list[TraceEvent]:
    """Set ``abort`` on each WriterFillPayload whose writer's next event is WriterAbort."""
    out = list(events)
    pending: int | None = None  # the writer's last WriterFillPayload, by position
    for n, e in enumerate(out):
        if e.actor != WRITER_ACTOR:
            continue
        if e.action == WRITER_ABORT and pending is not None:
            p = out[pending]
            out[pending] = TraceEvent(p.actor, p.action, p.chunk, p.reader, p.after, p.seq, True)
        pending = n if e.action == WRITER_FILL_PAYLOAD else None
    return out


def _signed64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


class TraceRecorder:
    """A StepObserver that appends every step of its cursors to a :class:`TraceLog`.

    One per process (threads of one process may share one or have their own).
    ``before_step`` takes the log's lock, ``after_step`` appends the event and
    releases it: only while recording; once the log is full neither locks.
    """

    def __init__(self, log: TraceLog, handle: RingHandle, lock_timeout: float = LOCK_TIMEOUT):
        if handle.n_reader + 1 > MAX_FLAGS:
            raise MisuseError(f"a trace records at most {MAX_FLAGS - 1} readers")
        self.layout = RingLayout(handle.n_reader, handle.max_chunk_bytes, handle.max_chunks)
        self._segment = SharedSegment.attach(handle.name, self.layout.total_bytes)
        self._file = open(log.path, "r+b")  # noqa: SIM115 -- closed in close()
        self._map = mmap.mmap(self._file.fileno(), 0)
        self._lock = log.lock
        self._capacity = log.capacity
        self._timeout = lock_timeout
        self._full = False
        self._held: set[str] = set()  # actors inside a recorded step
        self._loaded: dict[str, tuple[int, bool]] = {}

    def loaded(self, actor: str, seq: int, raising: bool = False) -> None:
        """The reader ``actor``'s caller loaded message ``seq`` in this ReaderReadPayload
        (and is about to raise, if ``raising``)."""
        self._loaded[actor] = (_signed64(seq), raising)

    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        if self._full or action in SLEEP_STEPS:  # ReaderSleep.tla's, not RingBuffer.tla's
            return
        if not self._lock.acquire(timeout=self._timeout):
            raise TraceError(
                f"{actor} {action}: the trace lock was not free within {self._timeout:g} s"
            )
        _, count, dropped, folded = _HEADER.unpack_from(self._map, 0)
        if count >= self._capacity:
            self._full = True
            _HEADER.pack_into(self._map, 0, self._capacity, count, dropped + 1, folded)
            self._lock.release()
            return
        self._held.add(actor)

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        if actor not in self._held:
            return
        self._held.discard(actor)
        try:
            lay = self.layout
            buf = self._segment.buf
            seq, code = NO_SEQ, ALL_STEPS.index(action)
            if action == WRITER_FILL_PAYLOAD:
                (seq,) = SEQ.unpack_from(buf, lay.data_offset(chunk))
            elif action == READER_READ_PAYLOAD:
                noted = self._loaded.pop(actor, None)
                if noted is None:
                    (seq,) = SEQ.unpack_from(buf, lay.data_offset(chunk))
                else:
                    seq, raising = noted
                    code |= 0x80 if raising else 0
            off = lay.flags_offset(chunk)
            flags = bytes(buf[off : off + lay.flags_per_chunk])
            _, count, dropped, folded = _HEADER.unpack_from(self._map, 0)
            rd = -1 if actor == WRITER_ACTOR else int(actor.removeprefix("reader"))
            record = _RECORD.pack(
                rd, code, chunk, -1 if reader is None else reader, len(flags), seq, flags
            )
            cycle = _failed_poll_cycle(action, rd, reader, flags)
            if cycle and self._repeats(count, cycle, record):
                # the same failed poll again, nobody stepped since: fold it
                count -= cycle - 1
                folded += cycle
            else:
                start = _HEADER_SIZE + count * _RECORD.size
                self._map[start : start + _RECORD.size] = record
                count += 1
            # the count last: a process killed mid-record leaves no half event
            _HEADER.pack_into(self._map, 0, self._capacity, count, dropped, folded)
        finally:
            self._lock.release()

    def _record(self, n: int) -> bytes:
        start = _HEADER_SIZE + n * _RECORD.size
        return self._map[start : start + _RECORD.size]

    def _repeats(self, count: int, cycle: int, record: bytes) -> bool:
        """Whether the log ends with ``cycle - 1`` events of ``record``'s actor that,
        with ``record``, repeat the ``cycle`` events just before them."""
        if count < 2 * cycle - 1:
            return False
        new = [self._record(n) for n in range(count - cycle + 1, count)] + [record]
        if any(r[0] != record[0] for r in new):  # one actor's consecutive events only
            return False
        old = [self._record(n) for n in range(count - 2 * cycle + 1, count - cycle + 1)]
        return old == new

    def close(self) -> None:
        if self._held:  # a step left open: never leave the others blocked
            self._held.clear()
            self._lock.release()
        self._map.close()
        self._file.close()
        self._segment.close()


def _failed_poll_cycle(action: str, rd: int, reader: int | None, flags: bytes) -> int:
    """The number of events of a poll that this load fails (its first load included),
    or 0 when the load does not fail the poll; judged from the flag bytes after it,
    at the flag positions the spec reads.

    A failed poll leaves the spec's state as it was before the poll's first load
    (a failed first load is a stutter; a failed later load goes back to the first
    load), and the replay of an event is determined by the event. So a failed poll
    that exactly repeats the same actor's previous failed poll, with no event of
    anyone in between, replays from and to the same state as that one: the
    recorder folds it (counted in the log's header) and the verdict is unchanged.
    """
    if action == READER_POLL_READ_FLAG:
        return 1 if flags[1 + rd] == 1 else 0
    if action == READER_POLL_WRITTEN:
        return 2 if flags[WRITTEN_POSITION] == 0 else 0
    if action == WRITER_POLL_READ_FLAG and reader is not None:
        return reader + 2 if flags[1 + reader] == 0 else 0
    return 0


# --------------------------------------------------------------------------- TLC


def tla_value(v: int) -> str:
    return str(v) if -(2**31) <= v < 2**31 else str(OUT_OF_RANGE_SEQ)


def tla_module(events: Sequence[TraceEvent]) -> str:
    """The events as ``TraceData.TraceLog``, a TLA+ sequence of records."""
    rows = []
    for e in events:
        after = ", ".join(str(b) for b in e.after)
        rows.append(
            f'[actor |-> "{e.actor}", rd |-> {e.rd}, action |-> "{e.action}", '
            f"chunk |-> {e.chunk}, reader |-> {-1 if e.reader is None else e.reader}, "
            f"after |-> <<{after}>>, seq |-> {tla_value(e.seq)}, "
            f"abort |-> {'TRUE' if e.abort else 'FALSE'}, "
            f"raised |-> {'TRUE' if e.raised else 'FALSE'}]"
        )
    body = ",\n    ".join(rows)
    return (
        "---- MODULE TraceData ----\nEXTENDS Integers, Sequences\n"
        f"TraceLog == <<\n    {body}\n>>\n====\n"
    )


#: Why TLC rejected a trace, by the result word it reported.
REASONS = {
    "ReplayStepInv": "the event is not that actor's next step in the spec",
    "ReplayChunkInv": "the event acts on another chunk than the actor's current one",
    "ReplayFlagsInv": "the chunk's flag bytes after the event differ from the spec's",
    "ReplaySeqInv": "the payload's sequence number is not the one filled / due",
}
REPLAY_INVARIANTS = tuple(REASONS)
SAFETY_INVARIANTS = (
    "TypeOKInv",
    "NoTornReadInv",
    "DeliveredPrefixInv",
    "PublishedBeforeReadInv",
    "NoOverwriteUnreadInv",
    "FlagInBoundsInv",
    "PollFlagsStableInv",
    "ReadFlagMeansReadInv",
)
ACCEPTED = "TraceNotDoneInv"


@dataclass
class Verdict:
    """What TLC made of one trace."""

    accepted: bool
    result: str  # TLC's result word: ACCEPTED, a Replay*Inv, a safety invariant, error(...)
    events: int
    states: str
    seconds: float
    rejected_at: int | None  # index of the event that could not be replayed
    event: Any  # that event (a TraceEvent, or the queue trace's QueueEvent)
    output: str = field(repr=False)
    reasons: dict[str, str] = field(default_factory=lambda: REASONS, repr=False)

    @property
    def reason(self) -> str:
        if self.accepted:
            return "every event replayed"
        if self.result in self.reasons:
            return self.reasons[self.result]
        if self.result.endswith("Inv"):
            return f"the spec's invariant {self.result} is violated"
        return f"TLC failed: {self.result}"

    def describe(self) -> str:
        verdict = "ACCEPTED" if self.accepted else f"REJECTED ({self.result})"
        head = (
            f"trace validation: {verdict}: {self.events} events, {self.states} states, "
            f"TLC {self.seconds:.1f} s"
        )
        if self.accepted:
            return head
        where = "" if self.event is None else f"\n  at event {self.rejected_at}: {self.event}"
        return f"{head}\n  {self.reason}{where}"


def validate(
    events: Sequence[TraceEvent],
    *,
    n_reader: int,
    max_chunks: int,
    messages: int,
    aborts: int | None = None,
    raises: int | None = None,
    workers: int = 1,
    timeout: float = 240,
    directory: str | os.PathLike[str] | None = None,
) -> Verdict:
    """Replay ``events`` with TLC; ``messages`` is the run's message count (MaxMsgs),
    ``aborts``/``raises`` the bounds (default: the counts in the trace)."""
    if aborts is None:
        aborts = sum(e.action == WRITER_ABORT for e in events)
    if raises is None:
        raises = sum(e.raised for e in events)
    constants = (
        f"    NReaders = {n_reader}\n    NChunks = {max_chunks}\n"
        f"    MaxMsgs = {max(messages, 1)}\n"
        f"    MaxAborts = {aborts}\n    MaxReaderRaises = {raises}\n"
        "    FlagIndex <- TraceFlagIndex\n"
    )
    return replay(
        ("RingBuffer.tla", "TraceRingBuffer.tla", "MCTrace.tla"), tla_module(events), constants,
        (*REPLAY_INVARIANTS, *SAFETY_INVARIANTS), events, REASONS,
        workers=workers, timeout=timeout, directory=directory,
    )


def replay(
    specs: Sequence[str],
    data_module: str,
    constants: str,
    invariants: Sequence[str],
    events: Sequence[Any],
    reasons: dict[str, str],
    *,
    workers: int = 1,
    timeout: float = 240,
    directory: str | os.PathLike[str] | None = None,
) -> Verdict:
    """Have TLC replay a trace: ``specs`` (from spec/, the last one the harness that
    binds ``Trace <- TraceValue``) beside ``data_module`` (TraceData.tla), with the
    cfg's ``constants`` lines, checking ``invariants`` and then :data:`ACCEPTED`."""
    from spec import tlc  # the repository's one TLC driver

    tmp_ctx = tempfile.TemporaryDirectory(prefix="vr-trace-") if directory is None else None
    tmp = Path(tmp_ctx.name) if tmp_ctx is not None else Path(directory or ".")
    harness = specs[-1]
    try:
        for name in specs:
            shutil.copy(tlc.SPEC_DIR / name, tmp / name)
        (tmp / "TraceData.tla").write_text(data_module)
        cfg = tmp / harness.replace(".tla", ".cfg")
        checks = "\n".join(f"INVARIANT {name}" for name in (*invariants, ACCEPTED))
        cfg.write_text(
            f"CONSTANTS\n{constants}    Trace <- TraceValue\n"
            f"INIT TraceInit\nNEXT TraceNext\n{checks}\n"
        )
        run = tlc.run(tmp / harness, cfg, workers=workers, timeout=timeout, deadlock=False)
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()
    result = run.result
    # a violation in the initial state (TLC message 2107) is one at the first event
    at: int | None = 0 if "is violated by the initial state" in run.output else None
    accepted = result == ACCEPTED
    if not accepted and run.trace and "step" in run.trace[-1].assignments:
        at = int(run.trace[-1].assignments["step"])
    event = events[at] if at is not None and at < len(events) else None
    return Verdict(
        accepted, result, len(events), run.states, run.seconds, at, event, run.output, reasons
    )
