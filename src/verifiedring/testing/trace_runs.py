"""Traced runs of the real ring, in separate processes: the harness of trace validation.

A writer and 1-2 readers (spawned processes) run real cursors with a
:class:`~verifiedring.testing.trace.TraceRecorder`; the writer can abort and retry, a
reader can raise after loading, and a hook of :class:`RunConfig` can change one side's
cursor inside its traced process (the tests put known bugs in that way).
:func:`record_run` returns a :class:`Recording` whose ``validate()`` asks TLC
(through :func:`verifiedring.testing.trace.validate`).
"""

from __future__ import annotations

import struct
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..cursors import ReaderCursor, WriterCursor
from ..ring import RingHandle, ShmRingBuffer
from ..shm import SharedSegment
from ..steps import WRITER_ABORT, reader_actor
from .launcher import Outcome, Supervisor, Task
from .replay import Verdict
from .trace import SEQ, TraceEvent, TraceLog, TraceRecorder, validate

#: A traced message: its sequence number, then a check word derived from it.
MESSAGE = struct.Struct("<qQ")
CHUNK_BYTES = 32
#: What every chunk holds before the run: a sequence number no message has (and not
#: the spec's NoSeq), so that a reader loading a chunk nobody wrote is rejected by the
#: replay's sequence check. A zeroed chunk would read as message 0.
UNWRITTEN = -4


def check_word(seq: int) -> int:
    return (seq * 0x9E3779B97F4A7C15 + 0x5BD1E995) % 2**64


class _CallerRaised(Exception):
    """The traced caller's own exception inside a with-body (an abort / a raise)."""


@dataclass(frozen=True)
class RunConfig:
    """One traced harness run. ``abort_every``: the writer's body raises before
    every such message (then retries it); ``raise_every``: reader 0's body raises
    after loading every such message. 0: never. ``writer_hook`` / ``reader_hook``
    (importable by name) are called with that side's cursor in its process, before
    its first step."""

    messages: int
    abort_every: int = 0
    raise_every: int = 0
    writer_hook: Callable[[WriterCursor], None] | None = None
    reader_hook: Callable[[ReaderCursor], None] | None = None
    stall_timeout: float = 5.0


def mark_unwritten(handle: RingHandle) -> None:
    """Store :data:`UNWRITTEN` at the start of every chunk's payload (before any cursor)."""
    lay = handle.layout
    segment = SharedSegment.attach(handle.name, lay.total_bytes)
    try:
        for chunk in range(lay.max_chunks):
            MESSAGE.pack_into(segment.buf, lay.data_offset(chunk), UNWRITTEN, 0)
    finally:
        segment.close()


def traced_writer(handle: RingHandle, log: TraceLog, cfg: RunConfig) -> int:
    """Write messages 0..N-1 (aborting and retrying some); the number of aborts."""
    ring = ShmRingBuffer.attach(handle)
    rec = TraceRecorder(log, handle)
    aborts = 0
    try:
        w = ring.writer(observer=rec)
        if cfg.writer_hook is not None:
            cfg.writer_hook(w)
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
        if cfg.reader_hook is not None:
            cfg.reader_hook(r)
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
            mark_unwritten(handle)
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
