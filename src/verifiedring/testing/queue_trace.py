"""Trace validation of real multiprocess message-queue runs against ``spec/queue/MessageQueue.tla``.

The writer (this process) and its local and remote readers (spawned processes)
each install a :class:`QueueRecorder` as their queue end's
:class:`~verifiedring.steps.QueueObserver`. All share one
:class:`QueueLog` (:mod:`~verifiedring.testing.tracelog`: a mapped file and one lock): a
step takes the lock in ``begin`` and appends its event and releases it in
``end``, so the log's order is an order in which the steps happened. Each event
holds the actor, the step, the message's sequence number, whether a published or
taken chunk is an overflow marker, and the *object number* of what the step
published or delivered: ``identify(obj)``, computed from the object itself (so a
reader handed the wrong bytes is caught even when the protocol's headers agree),
-1 for a :class:`~verifiedring.errors.DecodeError`.

:func:`validate_queue` has TLC replay the events through
``spec/trace/TraceMessageQueue.tla``; :func:`~verifiedring.testing.queue_runs.record_queue_run`
is the traced harness
in :mod:`~verifiedring.testing.queue_runs`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DecodeError
from ..queue.sockets import hwm_for_window
from ..steps import (
    QUEUE_STEPS,
    READER_TIMEOUT,
    WRITER_ACTOR,
    WRITER_READER_LEFT,
    WRITER_SEND_FAILS,
    reader_actor,
)
from .replay import Harness, Verdict, data_module, replay
from .tracelog import LOCK_TIMEOUT, MappedLog, SharedLog, TraceError

#: rank (-1 the writer), step index in QUEUE_STEPS, kind index, sequence number, object number
_RECORD = struct.Struct("<bBBxxxxxqq")
#: What a chunk step published or took (QueueObserver's ``kind``); "" for other steps.
KINDS = ("", "inline", "overflow", "first", "more", "last", "abort")
NO_OBJECT = -2  # the step moved no object
DECODE_ERROR = -1


@dataclass(frozen=True)
class QueueEvent:
    """One recorded queue step (sequence numbers as the code counts them, from 0)."""

    rd: int  # the reader's rank, -1 for the writer
    action: str
    seq: int
    obj: int  # identify(obj), DECODE_ERROR, or NO_OBJECT
    kind: str  # one of KINDS

    @property
    def actor(self) -> str:
        return WRITER_ACTOR if self.rd < 0 else reader_actor(self.rd)

    def __str__(self) -> str:
        what = {NO_OBJECT: "", DECODE_ERROR: " DecodeError"}.get(self.obj, f" object {self.obj}")
        kind = f" ({self.kind})" if self.kind else ""
        return f"{self.actor} {self.action} seq {self.seq}{what}{kind}"


class QueueLog(SharedLog):
    """The shared event log of one traced queue run (:class:`~.tracelog.SharedLog`)."""

    RECORD = _RECORD

    def events(self) -> list[QueueEvent]:
        """The recorded events, in order."""
        return [
            QueueEvent(rd, QUEUE_STEPS[action], seq, obj, KINDS[kind])
            for rd, action, kind, seq, obj in self.records()
        ]


class QueueRecorder(MappedLog):
    """A QueueObserver appending every step of its queue end to a :class:`QueueLog`.
    Once the log is full it neither records nor locks."""

    def __init__(
        self, log: QueueLog, identify: Callable[[Any], int], lock_timeout: float = LOCK_TIMEOUT
    ) -> None:
        super().__init__(log, lock_timeout)
        self._identify = identify
        self._held = False

    def begin(self, actor: str) -> None:
        if self._held:
            raise TraceError(f"{actor}: a step began inside another step")
        self._held = self.enter(actor)

    def end(
        self, actor: str, action: str, seq: int, obj: object = None, kind: str = ""
    ) -> None:
        if not self._held:
            return
        self._held = False
        try:
            if obj is None:
                number = NO_OBJECT
            elif isinstance(obj, DecodeError):
                number = DECODE_ERROR
            else:
                number = self._identify(obj)
            rd = -1 if actor == WRITER_ACTOR else int(actor.removeprefix("reader"))
            self.append(
                _RECORD.pack(rd, QUEUE_STEPS.index(action), KINDS.index(kind), seq, number)
            )
        finally:
            self.leave()


# --------------------------------------------------------------------------- TLC

#: Why TLC rejected a queue trace, by the result word it reported.
REASONS = {
    "ReplayStepInv": "the event is not that actor's next step in the spec",
    "ReplayAgreeInv": "what the event moved (kind, sequence number, object, total) differs",
}
#: The writer's failures, which share one budget in the spec (MaxSendFails).
_FAILURES = (WRITER_SEND_FAILS, WRITER_READER_LEFT)
SAFETY_INVARIANTS = (
    "TypeOKInv",
    "DeliveredPrefixInv",
    "NoLossInv",
    "NoOutOfOrderInv",
    "ClosedAfterAllInv",
    "ToldAfterAllInv",
    "OutcomeInv",
)


#: The queue's replay: through TraceMessageQueue.tla into MessageQueue.tla.
QUEUE = Harness(
    ("MessageQueue.tla", "TraceMessageQueue.tla", "MCTraceMQ.tla"),
    (*REASONS, *SAFETY_INVARIANTS),
    REASONS,
)


def tla_module(events: Sequence[QueueEvent]) -> str:
    """The events as ``TraceData.TraceLog``, in the spec's numbering: sequence
    numbers and objects from 1, counts (SHUTDOWN's and BROKEN's totals, a reader's
    messages received when it is told) as they are, 0 for none."""
    counts = {
        "WriterShutdown", "ReaderSeeShutdown", "RemoteSeeShutdown", "ReaderClose",
        "WriterReaderLeft", "WriterTellBroken", "ReaderSeeBroken", "RemoteSeeBroken",
        "ReaderTold",
    }
    rows = []
    for e in events:
        seq = e.seq if e.action in counts else e.seq + 1
        obj = {NO_OBJECT: 0, DECODE_ERROR: -1}.get(e.obj, e.obj + 1)
        kind = e.kind
        rows.append(
            f'[actor |-> "{e.actor}", rd |-> {e.rd}, action |-> "{e.action}", '
            f'seq |-> {max(seq, 0)}, obj |-> {obj}, kind |-> "{kind}"]'
        )
    return data_module(rows)


def validate_queue(
    events: Sequence[QueueEvent],
    *,
    local_ranks: Sequence[int],
    remote_ranks: Sequence[int],
    max_chunks: int,
    remote_window: int,
    workers: int = 1,
    timeout: float = 240,
) -> Verdict:
    """Replay ``events`` with TLC, with the code's design and high-water marks."""

    def ranks(rs: Sequence[int]) -> str:
        return "{" + ", ".join(str(r) for r in rs) + "}"

    published = sum(e.action == "WriterPublishChunk" for e in events)
    constants = (
        f"    LocalReaders = {ranks(local_ranks)}\n    RemoteReaders = {ranks(remote_ranks)}\n"
        f"    K = {max_chunks}\n    M = {max(published, 1)}\n"
        f"    LocalHWM = {hwm_for_window(max_chunks + 1)}\n"
        f"    RemoteHWM = {hwm_for_window(remote_window)}\n    Window = {remote_window}\n"
        f"    MaxTimeouts = {sum(e.action == READER_TIMEOUT for e in events)}\n"
        f"    MaxSendFails = {sum(e.action in _FAILURES for e in events)}\n"
        f"    MaxDecodeFails = {sum(e.obj == DECODE_ERROR for e in events)}\n"
        "    WaitSubs = TRUE\n    SendReady = TRUE\n    ConsumeReady = TRUE\n"
        '    PendingDesign = "remember"\n    SeqCheck = TRUE\n    StashDesign = "stash"\n'
        '    DecodeAdvances = TRUE\n    SendFailDesign = "break"\n    CreditSlack = 0\n'
        "    AcksSent = TRUE\n"
    )
    return replay(QUEUE, tla_module(events), constants, events, workers=workers, timeout=timeout)


__all__ = ["QueueEvent", "QueueLog", "QueueRecorder", "validate_queue"]
