"""Trace validation of real multiprocess ring runs: record, then let TLC replay.

A writer and its readers, each in its own spawned process (or thread), install
a :class:`TraceRecorder` as their cursors' :class:`~verifiedring.steps.StepObserver`.
All recorders of one run share a :class:`TraceLog` (:mod:`~verifiedring.testing.tracelog`:
a file mapped into every process, one record per step, and one lock). A recorder
takes the lock in ``before_step`` and releases it in ``after_step``, after appending
the step's event, so the log's order is the order the steps happened in (a
linearization of the run). Each event holds the
actor, the step name, the chunk, the read-flag index (writer flag steps), the
chunk's flag bytes after the step and, for the payload steps, the *payload
sequence number*: the first 8 bytes of the chunk (little-endian, signed) after
``WriterFillPayload`` (what the writer stored) and, for ``ReaderReadPayload``,
what the reader's caller reports it loaded (:meth:`TraceRecorder.loaded`; the
chunk's bytes when it reports nothing). A failed poll that exactly repeats the
same actor's previous failed poll, with no step of anyone in between (a waiting
side spinning), is folded into that one (:func:`_failed_poll_cycle` says why the
verdict cannot change). Once the log is full, recording stops; the run goes on.

:func:`validate` has TLC replay the events (:func:`~verifiedring.testing.replay.replay`)
through ``RingBuffer.tla``, ``TraceRingBuffer.tla`` and ``MCTrace.tla``; see
``spec/trace/TraceRingBuffer.tla`` for what the replay requires. The verdict names the
first requirement an event failed and that event.

:func:`verifiedring.testing.trace_runs.record_run` is a traced run of the test
harness (message ``k`` carries ``k`` and a check word derived from it; the
writer's body can raise and retry, readers' bodies can raise after loading),
optionally with a hook that changes one side's cursor inside the traced child
processes. ``python -m stress ring --trace`` records a stress run.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

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
from .replay import Harness, ReplayOptions, Verdict, data_module, replay
from .tracelog import LOCK_TIMEOUT, MappedLog, SharedLog

#: The spec's sequence number of an event that moves no payload (``NoSeq``).
NO_SEQ = -2
#: A sequence number TLC cannot represent (outside 32-bit signed integers).
OUT_OF_RANGE_SEQ = -3
SEQ = struct.Struct("<q")  # the payload's first 8 bytes, as the recorder reads them
MAX_FLAGS = 8  # flag bytes a record holds: written + up to 7 readers

#: actor (-1 writer, else reader index), action (index in ALL_STEPS), chunk,
#: read-flag index (-1 none), flag bytes used, seq, flag bytes
RECORD = struct.Struct(f"<bBHbBxxq{MAX_FLAGS}s")


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


class TraceLog(SharedLog):
    """The shared event log of one traced ring run (:class:`~.tracelog.SharedLog`)."""

    RECORD = RECORD

    def events(self) -> list[TraceEvent]:
        """The recorded events, in order; ``abort`` set from the writer's next event."""
        raw = [
            TraceEvent(
                WRITER_ACTOR if actor < 0 else reader_actor(actor),
                ALL_STEPS[action & 0x7F],
                chunk,
                None if reader < 0 else reader,
                tuple(flags[:nflags]),
                seq,
                raised=bool(action & 0x80),
            )
            for actor, action, chunk, reader, nflags, seq, flags in self.records()
        ]
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


class TraceRecorder(MappedLog):
    """A StepObserver that appends every step of its cursors to a :class:`TraceLog`.

    One per process (threads of one process may share one or have their own).
    ``before_step`` takes the log's lock, ``after_step`` appends the event and
    releases it: only while recording; once the log is full neither locks.
    """

    def __init__(self, log: TraceLog, handle: RingHandle, lock_timeout: float = LOCK_TIMEOUT):
        if handle.n_reader + 1 > MAX_FLAGS:
            raise MisuseError(f"a trace records at most {MAX_FLAGS - 1} readers")
        super().__init__(log, lock_timeout)
        self.layout = RingLayout(handle.n_reader, handle.max_chunk_bytes, handle.max_chunks)
        self._segment = SharedSegment.attach(handle.name, self.layout.total_bytes)
        self._held: set[str] = set()  # actors inside a recorded step
        self._loaded: dict[str, tuple[int, bool]] = {}

    def loaded(self, actor: str, seq: int, raising: bool = False) -> None:
        """The reader ``actor``'s caller loaded message ``seq`` in this ReaderReadPayload
        (and is about to raise, if ``raising``)."""
        self._loaded[actor] = (_signed64(seq), raising)

    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        if action in SLEEP_STEPS:  # ReaderSleep.tla's, not RingBuffer.tla's
            return
        if self.enter(f"{actor} {action}"):
            self._held.add(actor)

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        if actor not in self._held:
            return
        self._held.discard(actor)
        try:
            rd = -1 if actor == WRITER_ACTOR else int(actor.removeprefix("reader"))
            seq, code, flags = self._observe(actor, action, chunk)
            record = RECORD.pack(
                rd, code, chunk, -1 if reader is None else reader, len(flags), seq, flags
            )
            cycle = _failed_poll_cycle(action, rd, reader, flags)
            count, dropped, folded = self.counts()
            if cycle and self._repeats(count, cycle, record):
                # the same failed poll again, nobody stepped since: fold it
                self.set_counts(count - (cycle - 1), dropped, folded + cycle)
            else:
                self.append(record)
        finally:
            self.leave()

    def _observe(self, actor: str, action: str, chunk: int) -> tuple[int, int, bytes]:
        """(seq, action code, the chunk's flag bytes) right after ``action``."""
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
        return seq, code, bytes(buf[off : off + lay.flags_per_chunk])

    def _repeats(self, count: int, cycle: int, record: bytes) -> bool:
        """Whether the log ends with ``cycle - 1`` events of ``record``'s actor that,
        with ``record``, repeat the ``cycle`` events just before them."""
        if count < 2 * cycle - 1:
            return False
        new = [self.record(n) for n in range(count - cycle + 1, count)] + [record]
        if any(r[0] != record[0] for r in new):  # one actor's consecutive events only
            return False
        old = [self.record(n) for n in range(count - 2 * cycle + 1, count - cycle + 1)]
        return old == new

    def close(self) -> None:
        self._held.clear()
        super().close()
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
    return data_module(rows)


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

#: The ring's replay: through TraceRingBuffer.tla into RingBuffer.tla.
RING = Harness(
    ("RingBuffer.tla", "TraceRingBuffer.tla", "MCTrace.tla"),
    (*REPLAY_INVARIANTS, *SAFETY_INVARIANTS),
    REASONS,
)


def validate(
    events: Sequence[TraceEvent],
    *,
    n_reader: int,
    max_chunks: int,
    messages: int,
    aborts: int | None = None,
    raises: int | None = None,
    options: ReplayOptions | None = None,
) -> Verdict:
    """Replay ``events`` with TLC; ``messages`` is the run's message count (MaxMsgs),
    ``aborts``/``raises`` the bounds (default: the counts in the trace), ``options``
    how TLC runs (:class:`~verifiedring.testing.replay.ReplayOptions`; default: its defaults)."""
    if options is None:
        options = ReplayOptions()
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
        RING, tla_module(events), constants, events,
        workers=options.workers, timeout=options.timeout, directory=options.directory,
    )
