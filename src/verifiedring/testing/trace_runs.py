"""Traced runs of the real ring, in separate processes: the harness of trace validation.

A writer and 1-2 readers (spawned processes) run real cursors with a
:class:`~verifiedring.testing.trace.TraceRecorder`; the writer can abort and retry, a
reader can raise after loading, and :data:`MUTANTS` puts a known bug into the cursors
inside the traced processes. :func:`record_run` returns a :class:`Recording` whose
``validate()`` asks TLC (through :func:`verifiedring.testing.trace.validate`).
"""

from __future__ import annotations

import struct
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ..cursors import ReaderCursor, WriterCursor
from ..layout import WRITTEN_POSITION
from ..ordering import fence
from ..ring import RingHandle, ShmRingBuffer
from ..steps import (
    READER_READ_PAYLOAD,
    WRITER_ABORT,
    WRITER_ACTOR,
    WRITER_CLEAR_READ_FLAG,
    WRITER_FILL_PAYLOAD,
    WRITER_POLL_READ_FLAG,
    WRITER_POLL_WRITTEN,
    WRITER_PUBLISH,
    reader_actor,
)
from .launcher import Outcome, Supervisor, Task
from .trace import (
    SEQ,
    TraceEvent,
    TraceLog,
    TraceRecorder,
    Verdict,
    validate,
)

#: A traced message: its sequence number, then a check word derived from it.
MESSAGE = struct.Struct("<qQ")
CHUNK_BYTES = 32


def check_word(seq: int) -> int:
    return (seq * 0x9E3779B97F4A7C15 + 0x5BD1E995) % 2**64


class _CallerRaised(Exception):
    """The traced caller's own exception inside a with-body (an abort / a raise)."""


@dataclass(frozen=True)
class RunConfig:
    """One traced harness run. ``abort_every``: the writer's body raises before
    every such message (then retries it); ``raise_every``: reader 0's body raises
    after loading every such message. 0: never."""

    messages: int
    abort_every: int = 0
    raise_every: int = 0
    mutant: str | None = None
    stall_timeout: float = 5.0


# Mutants: a known bug applied to one side's cursor in its traced process. The
# observer calls stay where the code's `# spec:` sites are; only the statements move.


class _PublishBeforeClear(WriterCursor):
    """Writer: written = 1 before the read flags are cleared."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            return super().__exit__(exc_type, exc, tb)
        i = self.index
        obs = self.observer
        self._holding = False
        if obs is not None:
            obs.after_step(WRITER_ACTOR, WRITER_FILL_PAYLOAD, i, None)
        flags = self._flags[i]
        fence()
        if obs is not None:
            obs.before_step(WRITER_ACTOR, WRITER_PUBLISH, i, None)
        flags[WRITTEN_POSITION] = 1  # BUG: published with the old read flags still set
        if obs is not None:
            obs.after_step(WRITER_ACTOR, WRITER_PUBLISH, i, None)
        for r, pos in self._positions:
            if obs is not None:
                obs.before_step(WRITER_ACTOR, WRITER_CLEAR_READ_FLAG, i, r)
            flags[pos] = 0
            if obs is not None:
                obs.after_step(WRITER_ACTOR, WRITER_CLEAR_READ_FLAG, i, r)
        self.index = (i + 1) % self._max_chunks


class _AnyReader(WriterCursor):
    """Writer: a chunk is free as soon as ANY reader's flag is 1."""

    def _poll_free(self) -> bool:
        i = self.index
        flags = self._flags[i]
        obs = self.observer
        if obs is not None:
            obs.before_step(WRITER_ACTOR, WRITER_POLL_WRITTEN, i, None)
        written = flags[WRITTEN_POSITION]
        if obs is not None:
            obs.after_step(WRITER_ACTOR, WRITER_POLL_WRITTEN, i, None)
        if not written:
            fence()
            return True
        for r, pos in self._positions:
            if obs is not None:
                obs.before_step(WRITER_ACTOR, WRITER_POLL_READ_FLAG, i, r)
            seen = flags[pos]
            if obs is not None:
                obs.after_step(WRITER_ACTOR, WRITER_POLL_READ_FLAG, i, r)
            if seen:  # BUG: one reader done frees the chunk for every reader
                fence()
                return True
        return False


class _ReleaseBeforePayload(ReaderCursor):
    """Reader: its read flag is stored before the caller loads the payload."""

    def __enter__(self) -> memoryview:
        if self._closed or self._holding:
            self._refuse()
        if self.observer is not None:
            self.observer.before_step(self.actor, READER_READ_PAYLOAD, self.index, None)
        self._flags[self.index][self._own] = 1  # BUG: released before the loads
        self._holding = True
        return self._data[self.index]


class _WrongChunk(ReaderCursor):
    """Reader: hands its caller the next chunk's bytes (an off-by-one view index)."""

    def __enter__(self) -> memoryview:
        if self._closed or self._holding:
            self._refuse()
        if self.observer is not None:
            self.observer.before_step(self.actor, READER_READ_PAYLOAD, self.index, None)
        self._holding = True
        return self._data[(self.index + 1) % self._max_chunks]  # BUG: index + 1


def _shift_flag(cursor: ReaderCursor) -> None:
    """Reader k: uses reader k+1's read flag (a flag index off by one)."""
    n = cursor._n_reader
    cursor._own = cursor._ring.layout.read_flag_position((cursor.reader + 1) % n)


#: name -> (side it applies to, what it does to that side's cursor)
MUTANTS: dict[str, tuple[str, Any]] = {
    "publish_before_clear": ("writer", _PublishBeforeClear),
    "any_reader": ("writer", _AnyReader),
    "release_before_payload": ("reader", _ReleaseBeforePayload),
    "wrong_chunk": ("reader", _WrongChunk),
    "shifted_flag": ("reader", _shift_flag),
}


def _apply_mutant(cursor: WriterCursor | ReaderCursor, mutant: str | None, side: str) -> None:
    if mutant is None:
        return
    where, bug = MUTANTS[mutant]
    if where != side:
        return
    if isinstance(bug, type):
        cursor.__class__ = bug
    else:
        bug(cursor)


def traced_writer(handle: RingHandle, log: TraceLog, cfg: RunConfig) -> int:
    """Write messages 0..N-1 (aborting and retrying some); the number of aborts."""
    ring = ShmRingBuffer.attach(handle)
    rec = TraceRecorder(log, handle)
    aborts = 0
    try:
        w = ring.writer(observer=rec)
        _apply_mutant(w, cfg.mutant, "writer")
        for seq in range(cfg.messages):
            if cfg.abort_every and seq % cfg.abort_every == cfg.abort_every - 1:
                try:
                    with w.acquire_write(cfg.stall_timeout) as buf:
                        SEQ.pack_into(buf, 0, -100 - seq)  # a partial store, then the raise
                        raise _CallerRaised
                except _CallerRaised:
                    aborts += 1
            with w.acquire_write(cfg.stall_timeout) as buf:
                MESSAGE.pack_into(buf, 0, seq, check_word(seq))
    finally:
        rec.close()
        ring.close()
    return aborts


def traced_reader(handle: RingHandle, k: int, log: TraceLog, cfg: RunConfig) -> int:
    """Read every message, checking order and content exactly; the number of raises."""
    ring = ShmRingBuffer.attach(handle)
    rec = TraceRecorder(log, handle)
    raises = 0
    try:
        r = ring.reader(k, observer=rec)
        _apply_mutant(r, cfg.mutant, "reader")
        for m in range(cfg.messages):
            raising = k == 0 and cfg.raise_every > 0 and m % cfg.raise_every == cfg.raise_every - 1
            try:
                with r.acquire_read(cfg.stall_timeout) as buf:
                    seq, word = MESSAGE.unpack_from(buf)
                    rec.loaded(r.actor, seq, raising)
                    if raising:
                        raise _CallerRaised
            except _CallerRaised:
                raises += 1
            if seq != m or word != check_word(seq):
                raise AssertionError(f"reader {k}: message #{m} arrived as #{seq} (word {word:#x})")
    finally:
        rec.close()
        ring.close()
    return raises


@dataclass
class Recording:
    """One traced run: its events, the bounds for the spec, how each process ended."""

    events: list[TraceEvent]
    n_reader: int
    max_chunks: int
    messages: int
    dropped: int  # steps after the log was full
    folded: int  # events of failed polls that repeated the actor's previous one
    outcomes: list[Outcome]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    @property
    def aborts(self) -> int:
        return sum(e.action == WRITER_ABORT for e in self.events)

    @property
    def raises(self) -> int:
        return sum(e.raised for e in self.events)

    def validate(self, events: Sequence[TraceEvent] | None = None, **kw: Any) -> Verdict:
        """TLC's verdict on this run's trace (or on ``events``, e.g. a tampered copy)."""
        evs = self.events if events is None else events
        kw.setdefault("aborts", self.aborts)
        kw.setdefault("raises", self.raises)
        return validate(
            evs, n_reader=self.n_reader, max_chunks=self.max_chunks, messages=self.messages, **kw
        )


def record_run(
    n_reader: int,
    max_chunks: int,
    cfg: RunConfig,
    *,
    capacity: int = 20000,
    time_limit: float = 60.0,
    failure_grace: float = 1.0,
) -> Recording:
    """Run a traced writer and ``n_reader`` readers, each a spawned process."""
    start = time.monotonic()
    ring = ShmRingBuffer(n_reader, CHUNK_BYTES, max_chunks)
    with tempfile.TemporaryDirectory(prefix="vr-tracelog-") as tmp:
        log = TraceLog.create(tmp, capacity)
        try:
            handle = ring.handle()
            tasks = [Task(traced_writer, (handle, log, cfg), name="writer")] + [
                Task(traced_reader, (handle, k, log, cfg), name=reader_actor(k))
                for k in range(n_reader)
            ]
            with Supervisor(tasks) as procs:
                outcomes = procs.wait(time_limit, failure_grace=failure_grace)
        finally:
            ring.close()
        events = log.events()
        _, _, dropped, folded = log.header()
    return Recording(
        events,
        n_reader,
        max_chunks,
        cfg.messages,
        dropped,
        folded,
        outcomes,
        round(time.monotonic() - start, 3),
    )
