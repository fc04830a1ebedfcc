"""The traced harness of queue trace validation: a real writer and its readers.

:func:`record_queue_run` runs a writer (this process) and its local and remote
readers (spawned), each with a :class:`~verifiedring.testing.queue_trace.QueueRecorder`:
mixed inline and overflow objects (or streamed runs), objects that fail to unpickle
on the readers or to pickle mid-run, zero-timeout dequeues that time out on a pending
frame and resume, SHUTDOWN. Every reader checks every object exactly. The
:class:`QueueRecording` it returns validates with TLC.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import (
    BrokenPeerError,
    ClosedError,
    DecodeError,
    MessageAbortedError,
    MisuseError,
    RingTimeoutError,
)
from ..queue.handle import Handle
from ..queue.message_queue import MessageQueue
from ..queue.writer import QueueWriter
from .launcher import Outcome, Supervisor, Task
from .queue_trace import DECODE_ERROR, QueueEvent, QueueLog, QueueRecorder, validate_queue
from .replay import Verdict

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
    (retrying on RingTimeoutError) for every such message; ``large_objects``: the
    writer's mode. ``writer_type`` and ``reader_setup`` (run first in each reader's
    process; importable by name) change the code under trace, e.g. to a known bug's.
    ``leave_at``: the last reader rank closes after that many messages; the writer
    breaks, and the others end at its BROKEN (not at SHUTDOWN)."""

    messages: int = 30
    n_local: int = 2
    n_remote: int = 1
    decode_fail_every: int = 7
    zero_timeout_every: int = 2
    stall_timeout: float = 10.0
    large_objects: str = "socket"  # "stream": objects above a chunk are runs
    abort_at: int = -1  # this message's pickling raises mid-run (stream, no remote reader)
    leave_at: int = -1
    chunk_bytes: int = CHUNK_BYTES
    writer_type: type[QueueWriter] = QueueWriter
    reader_setup: Callable[[], None] | None = None


#: What :func:`_take` returns for a poll that found nothing, and at the queue's end.
_AGAIN = object()
_END = object()


def _take(q: MessageQueue, k: int, rank: int, cfg: QueueRunConfig) -> Any:
    """Message ``k`` as the run expects it (its DecodeError turned into the object that
    failed), :data:`_AGAIN` after a timeout=0 poll, :data:`_END` at ClosedError or,
    in a run where a reader leaves, at the writer's BROKEN."""
    zero = cfg.zero_timeout_every and k % cfg.zero_timeout_every == 0
    try:
        return q.dequeue(0 if zero else cfg.stall_timeout)
    except RingTimeoutError:
        if not zero:
            raise
        return _AGAIN  # the retry returns the same message
    except DecodeError as exc:
        want = make_object(k, cfg.decode_fail_every, cfg.abort_at)
        aborted = isinstance(exc, MessageAbortedError)
        if not isinstance(want, AbortsMidRun if aborted else Unloadable):
            raise AssertionError(f"rank {rank}: message #{k}: {exc}") from exc
        return want
    except ClosedError:
        return _END
    except BrokenPeerError as exc:
        if cfg.leave_at < 0 or "broke for good" not in str(exc):
            raise
        return _END


def traced_queue_reader(handle: Handle, rank: int, log: QueueLog, cfg: QueueRunConfig) -> int:
    """Dequeue until ClosedError (or the writer's BROKEN, or ``cfg.leave_at`` for the
    leaving rank), checking every object exactly; the number received."""
    if cfg.reader_setup is not None:
        cfg.reader_setup()
    rec = QueueRecorder(log, identify)
    k = 0
    try:
        with MessageQueue.create_from_handle(handle, rank, observer=rec) as q:
            q.wait_until_ready(cfg.stall_timeout)
            leaves = rank == cfg.n_local + cfg.n_remote - 1 and cfg.leave_at >= 0
            while not (leaves and k == cfg.leave_at):
                obj = _take(q, k, rank, cfg)
                if obj is _AGAIN:
                    continue
                if obj is _END:
                    break
                expected = make_object(k, cfg.decode_fail_every, cfg.abort_at)
                if identify(obj) != k or (type(obj) is tuple and obj != expected):
                    raise AssertionError(f"rank {rank}: message #{k} arrived as {identify(obj)}")
                k += 1
    finally:
        rec.close()
    return k


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
    writer_error: str | None = None
    with tempfile.TemporaryDirectory(prefix="vr-qtrace-") as tmp:
        log = QueueLog.create(tmp, capacity)
        rec = QueueRecorder(log, identify)
        w = cfg.writer_type(
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
                    w.close()
                except Exception as exc:  # the readers' outcomes say the rest
                    writer_error = f"{type(exc).__name__}: {exc}"
                outcomes = procs.wait(time_limit, failure_grace=1.0)
        finally:
            w.close()
            rec.close()
        events = log.events()
        _, _, dropped, _ = log.header()
    return QueueRecording(
        events, local, remote, dropped, outcomes, writer_error,
        round(time.monotonic() - start, 3),
    )


__all__ = [
    "DECODE_ERROR",
    "QueueRecording",
    "QueueRunConfig",
    "identify",
    "make_object",
    "record_queue_run",
]
