"""Trace validation of real multiprocess message-queue runs against ``spec/MessageQueue.tla``.

The writer (this process) and its local and remote readers (spawned processes)
each install a :class:`QueueRecorder` as their queue end's
:class:`~verifiedring.steps.QueueObserver`. All share one
:class:`~verifiedring.testing.trace.TraceLog` (a mapped file and one lock): a
step takes the lock in ``begin`` and appends its event and releases it in
``end``, so the log's order is an order in which the steps happened. Each event
holds the actor, the step, the message's sequence number, whether a published or
taken chunk is an overflow marker, and the *object number* of what the step
published or delivered: ``identify(obj)``, computed from the object itself (so a
reader handed the wrong bytes is caught even when the protocol's headers agree),
-1 for a :class:`~verifiedring.errors.DecodeError`.

:func:`validate_queue` has TLC replay the events through
``spec/TraceMessageQueue.tla``; :func:`record_queue_run` is the traced harness
(mixed inline and overflow objects, objects that fail to unpickle on the readers,
zero-timeout dequeues that time out on a pending frame and resume, SHUTDOWN),
optionally with one of :data:`QUEUE_MUTANTS`.
"""

from __future__ import annotations

import mmap
import struct
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import (
    ClosedError,
    DecodeError,
    MessageAbortedError,
    MisuseError,
    RingTimeoutError,
)
from ..queue import local_reader as _local_reader_module
from ..queue.handle import Handle
from ..queue.message_queue import MessageQueue
from ..queue.sockets import hwm_for_window
from ..queue.writer import QueueWriter
from ..steps import (
    QUEUE_STEPS,
    READER_TIMEOUT,
    WRITER_ACTOR,
    WRITER_SEND_FAILS,
    reader_actor,
)
from .launcher import Outcome, Supervisor, Task
from .trace import _HEADER, _HEADER_SIZE, LOCK_TIMEOUT, TraceError, TraceLog, Verdict, replay

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


def events_of(log: TraceLog) -> list[QueueEvent]:
    """The events of a queue trace log, in order."""
    out = []
    for record in log.records():
        rd, action, kind, seq, obj = _RECORD.unpack(record)
        out.append(QueueEvent(rd, QUEUE_STEPS[action], seq, obj, KINDS[kind]))
    return out


class QueueRecorder:
    """A QueueObserver appending every step of its queue end to a :class:`TraceLog`
    (created with ``record_size=RECORD_SIZE``). Once the log is full it neither
    records nor locks."""

    def __init__(
        self, log: TraceLog, identify: Callable[[Any], int], lock_timeout: float = LOCK_TIMEOUT
    ) -> None:
        self._file = open(log.path, "r+b")  # noqa: SIM115 -- closed in close()
        self._map = mmap.mmap(self._file.fileno(), 0)
        self._lock = log.lock
        self._capacity = log.capacity
        self._identify = identify
        self._timeout = lock_timeout
        self._held = False

    def begin(self, actor: str) -> None:
        if self._held:
            raise TraceError(f"{actor}: a step began inside another step")
        if not self._lock.acquire(timeout=self._timeout):
            raise TraceError(f"{actor}: the trace lock was not free within {self._timeout:g} s")
        _, count, dropped, folded = _HEADER.unpack_from(self._map, 0)
        if count >= self._capacity:
            _HEADER.pack_into(self._map, 0, self._capacity, count, dropped + 1, folded)
            self._lock.release()
            return
        self._held = True

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
            _, count, dropped, folded = _HEADER.unpack_from(self._map, 0)
            start = _HEADER_SIZE + count * _RECORD.size
            self._map[start : start + _RECORD.size] = _RECORD.pack(
                rd, QUEUE_STEPS.index(action), KINDS.index(kind), seq, number
            )
            _HEADER.pack_into(self._map, 0, self._capacity, count + 1, dropped, folded)
        finally:
            self._lock.release()

    def close(self) -> None:
        if self._held:  # never leave the others blocked
            self._held = False
            self._lock.release()
        self._map.close()
        self._file.close()


RECORD_SIZE = _RECORD.size

# --------------------------------------------------------------------------- TLC

#: Why TLC rejected a queue trace, by the result word it reported.
REASONS = {
    "ReplayStepInv": "the event is not that actor's next step in the spec",
    "ReplayAgreeInv": "what the event moved (kind, sequence number, object, total) differs",
}
SAFETY_INVARIANTS = (
    "TypeOKInv",
    "DeliveredPrefixInv",
    "NoLossInv",
    "NoOutOfOrderInv",
    "ClosedAfterAllInv",
)


def _tla_bool(b: bool) -> str:
    return "TRUE" if b else "FALSE"


def tla_module(events: Sequence[QueueEvent]) -> str:
    """The events as ``TraceData.TraceLog``, in the spec's numbering: sequence
    numbers and objects from 1, SHUTDOWN's total as is, 0 for none."""
    shut = {"WriterShutdown", "ReaderSeeShutdown", "RemoteSeeShutdown", "ReaderClose"}
    rows = []
    for e in events:
        seq = e.seq if e.action in shut else e.seq + 1
        obj = {NO_OBJECT: 0, DECODE_ERROR: -1}.get(e.obj, e.obj + 1)
        kind = e.kind
        rows.append(
            f'[actor |-> "{e.actor}", rd |-> {e.rd}, action |-> "{e.action}", '
            f'seq |-> {max(seq, 0)}, obj |-> {obj}, kind |-> "{kind}"]'
        )
    body = ",\n    ".join(rows)
    return (
        "---- MODULE TraceData ----\nEXTENDS Integers, Sequences\n"
        f"TraceLog == <<\n    {body}\n>>\n====\n"
    )


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
        f"    MaxSendFails = {sum(e.action == WRITER_SEND_FAILS for e in events)}\n"
        f"    MaxDecodeFails = {sum(e.obj == DECODE_ERROR for e in events)}\n"
        "    WaitSubs = TRUE\n    SendReady = TRUE\n    ConsumeReady = TRUE\n"
        '    PendingDesign = "remember"\n    SeqCheck = TRUE\n    StashDesign = "stash"\n'
        '    DecodeAdvances = TRUE\n    SendFailDesign = "break"\n    CreditSlack = 0\n'
        "    AcksSent = TRUE\n"
    )
    return replay(
        ("MessageQueue.tla", "TraceMessageQueue.tla", "MCTraceMQ.tla"), tla_module(events),
        constants, (*REASONS, *SAFETY_INVARIANTS), events, REASONS, workers=workers,
        timeout=timeout,
    )


# --------------------------------------------------------------------------- harness

CHUNK_BYTES = 256  # objects above ~200 bytes overflow
MAX_CHUNKS = 2
REMOTE_WINDOW = 4


def _fail_to_load(k: int) -> Any:
    raise ValueError(f"object {k} refuses to unpickle (the harness's decode failure)")


class Unloadable:
    """Pickles fine, raises when unpickled: a reader's decode failure."""

    def __init__(self, k: int) -> None:
        self.k = k

    def __reduce__(self) -> tuple[Any, ...]:
        return (_fail_to_load, (self.k,))


class _Unpicklable:
    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("refuses to be pickled (the harness's mid-run pickling failure)")


class AbortsMidRun:
    """Pickles 70 KB (the pickler's first 64 KiB frame is written: a run begins), then
    raises: streamed, the writer publishes an ABORT for it."""

    def __init__(self, k: int) -> None:
        self.k = k

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, ([bytes(70_000), _Unpicklable()],))


def make_object(k: int, decode_fail_every: int, abort_at: int = -1) -> Any:
    """Object ``k`` of the harness: ``(k, bytes)`` of a size from k, inline or overflow
    (or a run); every ``decode_fail_every``-th fails to unpickle, ``abort_at`` to pickle."""
    if k == abort_at:
        return AbortsMidRun(k)
    if decode_fail_every and k % decode_fail_every == decode_fail_every - 1:
        return Unloadable(k)
    size = (k * 37) % 40 if k % 3 else 300 + (k * 11) % 200  # every third overflows
    return (k, bytes((k + i) % 251 for i in range(size)))


def identify(obj: Any) -> int:
    """The harness's number of an object (from the object, not from the protocol)."""
    return obj.k if isinstance(obj, (Unloadable, AbortsMidRun)) else int(obj[0])


@dataclass(frozen=True)
class QueueRunConfig:
    """One traced run. ``zero_timeout_every``: reader ranks' dequeues use timeout=0
    (retrying on RingTimeoutError) for every such message; ``mutant``: one of
    :data:`QUEUE_MUTANTS`; ``large_objects``: the writer's mode."""

    messages: int = 30
    n_local: int = 2
    n_remote: int = 1
    decode_fail_every: int = 7
    zero_timeout_every: int = 2
    mutant: str | None = None
    stall_timeout: float = 10.0
    large_objects: str = "socket"  # "stream": objects above a chunk are runs
    abort_at: int = -1  # this message's pickling raises mid-run (stream, no remote reader)
    chunk_bytes: int = CHUNK_BYTES


def _stale_load(original: Callable[..., Any]) -> Callable[..., Any]:
    """Mutant reader-wrong-object: from the 3rd inline message on, hand back the
    previous inline object (the bytes of another chunk) instead of this one."""
    previous: list[Any] = []

    def load(chunk: Any, header: Any) -> Any:
        obj = original(chunk, header)
        handed = previous[-1] if len(previous) >= 2 else obj
        previous.append(obj)
        return handed

    return load


class _ReusesSeq(QueueWriter):
    """Mutant writer-reuses-seq: after message 4 the sequence number is not advanced."""

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        super().enqueue(obj, timeout)
        if self._seq == 5:
            self._seq = 4


QUEUE_MUTANTS = ("reader-wrong-object", "writer-reuses-seq")


def traced_queue_reader(handle: Handle, rank: int, log: TraceLog, cfg: QueueRunConfig) -> int:
    """Dequeue until ClosedError, checking every object exactly; the number received."""
    rec = QueueRecorder(log, identify)
    if cfg.mutant == "reader-wrong-object":
        _local_reader_module._load_inline = _stale_load(_local_reader_module._load_inline)
    received = 0
    try:
        with MessageQueue.create_from_handle(handle, rank, observer=rec) as q:
            q.wait_until_ready(cfg.stall_timeout)
            k = 0
            while True:
                zero = cfg.zero_timeout_every and k % cfg.zero_timeout_every == 0
                try:
                    obj = q.dequeue(0 if zero else cfg.stall_timeout)
                except RingTimeoutError:
                    if not zero:
                        raise
                    continue  # the retry returns the same message
                except DecodeError as exc:
                    want = make_object(k, cfg.decode_fail_every, cfg.abort_at)
                    aborted = isinstance(exc, MessageAbortedError)
                    if not isinstance(want, AbortsMidRun if aborted else Unloadable):
                        raise AssertionError(f"rank {rank}: message #{k}: {exc}") from exc
                    obj = want
                except ClosedError:
                    break
                expected = make_object(k, cfg.decode_fail_every, cfg.abort_at)
                if identify(obj) != k or (type(obj) is tuple and obj != expected):
                    raise AssertionError(f"rank {rank}: message #{k} arrived as {identify(obj)}")
                k += 1
                received = k
    finally:
        rec.close()
    return received


@dataclass
class QueueRecording:
    """One traced queue run: its events, the geometry for the spec, how each process ended."""

    events: list[QueueEvent]
    local_ranks: list[int]
    remote_ranks: list[int]
    dropped: int
    outcomes: list[Outcome]
    writer_error: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.writer_error is None and all(o.ok for o in self.outcomes)

    def validate(self, events: Sequence[QueueEvent] | None = None, **kw: Any) -> Verdict:
        return validate_queue(
            self.events if events is None else events, local_ranks=self.local_ranks,
            remote_ranks=self.remote_ranks, max_chunks=MAX_CHUNKS,
            remote_window=REMOTE_WINDOW, **kw,
        )


def record_queue_run(
    cfg: QueueRunConfig, *, capacity: int = 20000, time_limit: float = 90.0
) -> QueueRecording:
    """A traced writer (this process) and its readers (spawned), one whole run."""
    start = time.monotonic()
    local = list(range(cfg.n_local))
    remote = list(range(cfg.n_local, cfg.n_local + cfg.n_remote))
    writer_type = _ReusesSeq if cfg.mutant == "writer-reuses-seq" else QueueWriter
    writer_error: str | None = None
    with tempfile.TemporaryDirectory(prefix="vr-qtrace-") as tmp:
        log = TraceLog.create(tmp, capacity, RECORD_SIZE)
        rec = QueueRecorder(log, identify)
        w = writer_type(
            cfg.n_local + cfg.n_remote, cfg.n_local, local, cfg.chunk_bytes, MAX_CHUNKS,
            "127.0.0.1", remote_window=REMOTE_WINDOW, observer=rec,
            large_objects=cfg.large_objects,
        )
        try:
            handle = w.export_handle()
            tasks = [
                Task(traced_queue_reader, (handle, r, log, cfg), name=f"rank {r}")
                for r in local + remote
            ]
            with Supervisor(tasks) as procs:
                try:
                    w.wait_until_ready(cfg.stall_timeout)
                    for k in range(cfg.messages):
                        obj = make_object(k, cfg.decode_fail_every, cfg.abort_at)
                        try:
                            w.enqueue(obj, cfg.stall_timeout)
                        except MisuseError:
                            if k != cfg.abort_at:
                                raise
                    w.shutdown()
                except Exception as exc:  # the readers' outcomes say the rest
                    writer_error = f"{type(exc).__name__}: {exc}"
                outcomes = procs.wait(time_limit, failure_grace=1.0)
        finally:
            w.close()
            rec.close()
        events = events_of(log)
        _, _, dropped, _ = log.header()
    return QueueRecording(
        events, local, remote, dropped, outcomes, writer_error,
        round(time.monotonic() - start, 3),
    )


__all__ = [
    "QUEUE_MUTANTS",
    "QueueEvent",
    "QueueRecorder",
    "QueueRecording",
    "QueueRunConfig",
    "events_of",
    "record_queue_run",
    "validate_queue",
]
