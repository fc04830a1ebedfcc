"""The spec steps each queue end reports to its observer, in order, for whole short runs
in this process: the events trace validation replays (tests/test_queue_trace.py) checked
here without TLC, with the exact errors each end raises at the end of the run."""

from __future__ import annotations

import os
import socket
import threading
from collections import Counter
from typing import Any

import pytest
from support.unpicklable import FailsToLoad, Unpicklable

from verifiedring import (
    BrokenPeerError,
    ClosedError,
    DecodeError,
    MessageAbortedError,
    MessageQueue,
    MisuseError,
)

T = 10.0
LOOPBACK = "127.0.0.1"
PID = os.getpid()
HOST = socket.gethostname()
Event = tuple[str, str, int, Any, str]


class Recorder:
    """A QueueObserver keeping ``(actor, step, seq, what, kind)``; ``what`` is a str
    object itself, an error's class name, or the type name of another object."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.objects: list[object] = []  # each event's object itself
        self._open: set[str] = set()

    def begin(self, actor: str) -> None:
        assert actor not in self._open, f"{actor} began a step inside another"
        self._open.add(actor)

    def end(self, actor: str, action: str, seq: int, obj: object = None, kind: str = "") -> None:
        self._open.discard(actor)
        self.objects.append(obj)
        what = obj if obj is None or isinstance(obj, str) else type(obj).__name__
        self.events.append((actor, action, seq, what, kind))

    def of(self, actor: str) -> list[Event]:
        return [e for e in self.events if e[0] == actor]


def _ready(rec: Recorder, *queues: MessageQueue) -> None:
    for q in queues:
        q.wait_until_ready(T)
    rec.events.clear()
    rec.objects.clear()


def _error(call: Any) -> BaseException:
    with pytest.raises(Exception) as info:  # the caller asserts the type
        call()
    return info.value


def test_a_run_that_ends_in_shutdown_reports_every_step_of_each_end() -> None:
    rec = Recorder()
    w = MessageQueue(2, 1, [0], connect_ip=LOOPBACK, max_chunk_bytes=256, max_chunks=4,
                     observer=rec)
    handle = w.export_handle()
    local = MessageQueue.create_from_handle(handle, 0, observer=rec)
    remote = MessageQueue.create_from_handle(handle, 1, observer=rec)
    assert [e[:2] for e in rec.events] == [
        ("reader0", "ReaderSubscribe"), ("reader1", "ReaderSubscribe")
    ]
    for q in (w, local, remote):
        q.wait_until_ready(T)
    assert sorted(rec.events[2:]) == [
        ("reader0", "ReaderAwaitReady", 0, None, ""),
        ("reader1", "ReaderAwaitReady", 0, None, ""),
        ("writer", "WriterHandshake", -1, None, ""),
    ]
    rec.events.clear()
    big = b"x" * 1000  # past a 256-byte chunk: an overflow marker, then its frame
    w.enqueue("a", timeout=T)
    w.enqueue(big, timeout=T)
    assert [local.dequeue(timeout=T), local.dequeue(timeout=T)] == ["a", big]
    assert [remote.dequeue(timeout=T), remote.dequeue(timeout=T)] == ["a", big]
    closing = threading.Thread(target=w.close)  # waits for the remote acknowledgements
    closing.start()
    for q, who in ((local, "local reader rank 0"), (remote, "remote reader rank 1")):
        err = _error(lambda q=q: q.dequeue(timeout=T))
        assert isinstance(err, ClosedError)
        assert str(err).endswith("the writer shut the queue down after 2 messages"), err
        assert str(err).startswith(who), err
    closing.join(T)
    assert not closing.is_alive()
    assert rec.of("writer") == [
        ("writer", "WriterPublishChunk", 0, "a", "inline"),
        ("writer", "WriterSendRemoteFrame", 0, None, ""),
        ("writer", "WriterPublishChunk", 1, "bytes", "overflow"),
        ("writer", "WriterSendLocalFrame", 1, None, ""),
        ("writer", "WriterSendRemoteFrame", 1, None, ""),
        ("writer", "WriterShutdown", 2, None, ""),
    ]
    assert rec.of("reader0") == [
        ("reader0", "ReaderTakeChunk", 0, "a", "inline"),
        ("reader0", "ReaderTakeChunk", 1, None, "overflow"),
        ("reader0", "ReaderRecvFrame", 1, "bytes", ""),
        ("reader0", "ReaderSeeShutdown", 2, None, ""),
        ("reader0", "ReaderClose", 2, None, ""),
    ]
    assert rec.of("reader1") == [
        ("reader1", "RemoteRecvFrame", 0, "a", ""),
        ("reader1", "RemoteRecvFrame", 1, "bytes", ""),
        ("reader1", "RemoteSeeShutdown", 2, None, ""),
        ("reader1", "ReaderClose", 2, None, ""),
    ]
    for q in (local, remote):
        q.close()


def test_a_reader_that_leaves_breaks_the_writer_and_the_others_are_told_why() -> None:
    rec = Recorder()
    w = MessageQueue(3, 1, [0], connect_ip=LOOPBACK, max_chunk_bytes=256, max_chunks=4,
                     remote_window=1, observer=rec)
    handle = w.export_handle()
    local = MessageQueue.create_from_handle(handle, 0, observer=rec)
    remote = MessageQueue.create_from_handle(handle, 1, observer=rec)
    leaver = MessageQueue.create_from_handle(handle, 2)
    _ready(rec, w, local, remote, leaver)
    w.enqueue("m0", timeout=T)
    assert [local.dequeue(timeout=T), remote.dequeue(timeout=T)] == ["m0", "m0"]
    leaver.close()  # without acknowledging m0: the writer waits for its credit
    gone = _error(lambda: w.enqueue("m1", timeout=T))
    assert isinstance(gone, BrokenPeerError)
    why = (f"writer (pid {PID}): reader rank 2 (pid {PID} on host {HOST}) is gone: its "
           "connection to the remote socket closed (it exited or died, or its heartbeats "
           "stopped)")
    assert str(gone) == why
    again = _error(lambda: w.enqueue("m2", timeout=T))
    assert str(again) == f"writer (pid {PID}): broken since a reader left: {why}"
    for q, who in ((local, "local reader rank 0"), (remote, "remote reader rank 1")):
        for _ in range(2):  # broken for good: every later call says the same
            err = _error(lambda q=q: q.dequeue(timeout=T))
            assert isinstance(err, BrokenPeerError)
            assert str(err) == (
                f"{who} (pid {PID}): the writer (pid {PID} on host {HOST}) broke "
                f"for good after sending 1 messages (broken since a reader left: {why})"
            )
    assert rec.events == [
        ("writer", "WriterPublishChunk", 0, "m0", "inline"),
        ("writer", "WriterSendRemoteFrame", 0, None, ""),
        ("reader0", "ReaderTakeChunk", 0, "m0", "inline"),
        ("reader1", "RemoteRecvFrame", 0, "m0", ""),
        ("writer", "WriterReaderLeft", 1, None, ""),
        ("writer", "WriterTellBroken", 1, None, ""),
        ("reader0", "ReaderSeeBroken", 1, None, ""),
        ("reader0", "ReaderTold", 1, None, ""),
        ("reader1", "RemoteSeeBroken", 1, None, ""),
    ]
    for q in (local, remote, w):
        q.close()


def test_a_failed_unpickling_and_an_aborted_run_are_each_one_reported_message() -> None:
    rec = Recorder()
    w = MessageQueue(1, 1, [0], max_chunk_bytes=4096, max_chunks=40, observer=rec,
                     large_objects="stream")
    local = MessageQueue.create_from_handle(w.export_handle(), 0, observer=rec)
    _ready(rec, w, local)
    w.enqueue(FailsToLoad(), timeout=T)
    # 100 KB, past the pickler's 64 KiB frame, go out in chunks before the bad object
    aborted = _error(lambda: w.enqueue([b"x" * 100_000, Unpicklable()], timeout=T))
    w.enqueue("last", timeout=T)
    published = Counter(e[1] for e in rec.of("writer"))
    n = published["WriterPublishRunChunk"]
    assert isinstance(aborted, MisuseError)
    assert str(aborted) == (
        f"writer (pid {PID}): cannot serialize message seq 1 (an object of type "
        f"builtins.list): TypeError('refuses to be pickled') after {n} of its chunks were "
        "published; the message was aborted (every reader raises MessageAbortedError for it)"
    )
    undecodable = _error(lambda: local.dequeue(timeout=T))
    assert type(undecodable) is DecodeError and undecodable.seq == 0
    cut = _error(lambda: local.dequeue(timeout=T))
    assert isinstance(cut, MessageAbortedError) and (cut.seq, cut.part) == (1, n)
    assert str(cut) == (
        f"local reader rank 0 (pid {PID}): message seq 1 was aborted by the writer "
        f"mid-message after {n} of its chunks (pickling raised TypeError('refuses to be "
        "pickled')); it was consumed, the next dequeue returns message seq 2"
    )
    assert local.dequeue(timeout=T) == "last"
    assert published == Counter(
        {"WriterPublishChunk": 2, "WriterPublishRunChunk": n, "WriterAbortRun": 1}
    )
    assert rec.of("writer")[-2:] == [
        ("writer", "WriterAbortRun", 1, "list", "abort"),
        ("writer", "WriterPublishChunk", 2, "last", "inline"),
    ]
    assert rec.of("reader0") == [
        ("reader0", "ReaderTakeChunk", 0, "DecodeError", "inline"),
        ("reader0", "ReaderTakeChunk", 1, None, "first"),
        ("reader0", "ReaderReleaseRunChunk", 1, None, "first"),
        *[("reader0", step, 1, None, "more")
          for _ in range(n - 1) for step in ("ReaderReadRunChunk", "ReaderReleaseRunChunk")],
        ("reader0", "ReaderReadRunChunk", 1, None, "abort"),
        ("reader0", "ReaderReleaseRunChunk", 1, "MessageAbortedError", "abort"),
        ("reader0", "ReaderTakeChunk", 2, "last", "inline"),
    ]
    for q in (local, w):
        q.close()


def test_an_in_place_message_is_reported_with_the_bytes_written() -> None:
    """acquire_write's WriterPublishChunk carries the payload as written (the object
    trace validation compares with the reader's), for a writer with and without a
    remote reader (whose frame is a copy of it)."""
    for n_remote in (0, 1):
        rec = Recorder()
        w = MessageQueue(1 + n_remote, 1, [0], connect_ip=LOOPBACK if n_remote else None,
                         max_chunk_bytes=64, max_chunks=2, observer=rec)
        readers = [MessageQueue.create_from_handle(w.export_handle(), r, observer=rec)
                   for r in range(1 + n_remote)]
        try:
            _ready(rec, w, *readers)
            with w.acquire_write(T) as buf:
                buf[:3] = b"abc"
                size = len(buf)
            payload = b"abc" + bytes(size - 3)
            assert [r.dequeue(T) for r in readers] == [payload] * (1 + n_remote)
            writer = [(e, o) for e, o in zip(rec.events, rec.objects, strict=True)
                      if e[0] == "writer"]
            assert writer[0] == (("writer", "WriterPublishChunk", 0, "bytes", "inline"), payload)
            assert len(writer) == 1 + n_remote  # and WriterSendRemoteFrame
        finally:
            for q in (*readers, w):
                q.close()
