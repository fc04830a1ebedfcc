"""Frames a socket still queues own their bytes: what a reader gets never depends on the
writer's Python objects staying alive.

pyzmq's zero-copy sends (``copy=False``, frames of >= 64 KiB) lend libzmq the memory of
a Python object, kept alive by pyzmq's garbage-collector thread until libzmq releases
the frame. At interpreter exit that thread stops and drops every reference it holds
(its atexit hook), while the queue's context -- never terminated -- still holds the
frames: each freed object then went out with whatever the allocator wrote over it (the
cross-host finding: the last 1-15 bytes, past a 16-byte boundary, were glibc's chunk
size). Here the writer queues frames behind a stopped remote reader, stops that thread
as exit does, reuses the freed memory, and the reader must still get every object exactly.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
from typing import Any

from verifiedring import ClosedError, DecodeError, MessageQueue

T = 20.0
LOOPBACK = "127.0.0.1"
N = 96
SIZE = 256 * 1024  # far above pyzmq's zero-copy threshold; 24 MiB in all, beyond TCP buffers


def payload(k: int) -> Any:
    """Object ``k``: a top-level bytes (an out-of-band buffer part) or, for odd ``k``,
    a tuple holding one (a large pickle stream part)."""
    data = random.Random(k).randbytes(SIZE)
    return data if k % 2 == 0 else (k, data)


def _send_all_on_go(w: MessageQueue, out: Any, go: Any) -> None:
    """Hand out ``w``'s handle, wait for the reader and the test's go, send N payloads."""
    out.put(("handle", w.export_handle()))
    w.wait_until_ready(T)
    if not go.wait(T):
        raise TimeoutError("no go from the test")
    for k in range(N):
        w.enqueue(payload(k), timeout=T)


def _writer_proc(out: Any, go: Any, finish: Any) -> None:
    import zmq.utils.garbage

    try:
        with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
            _send_all_on_go(w, out, go)
            zmq.utils.garbage.gc.stop()  # as at interpreter exit: its references dropped
            junk = [b"\xee" * (SIZE + n) for n in range(-64, 64) for _ in range(2)]
            out.put(("sent", len(junk)))
        # closed: its SHUTDOWN queues behind the frames, which flow while this process lives
        if not finish.wait(T):
            raise TimeoutError("no finish from the test")
        out.put(("done", None))
    except BaseException as exc:  # report, never hang the parent
        out.put(("error", repr(exc)))


def _reader_proc(handle: Any, out: Any) -> None:
    try:
        with MessageQueue.create_from_handle(handle, 1) as q:
            q.wait_until_ready(T)
            out.put(("ready", os.getpid()))
            wrong: list[int] = []
            for k in range(N):
                try:
                    if q.dequeue(T) != payload(k):
                        wrong.append(k)
                except DecodeError:
                    wrong.append(k)
            try:
                q.dequeue(T)
                tail = "no ClosedError"
            except ClosedError:
                tail = "closed"
            out.put(("got", (wrong, tail)))
    except BaseException as exc:
        out.put(("error", repr(exc)))


def _expect(q: Any, tag: str) -> Any:
    got_tag, value = q.get(timeout=T * 2)
    assert got_tag == tag, (got_tag, value)
    return value


def _started_reader(ctx: Any, handle: Any, rq: Any) -> Any:
    """The reader process, past its handshake."""
    reader = ctx.Process(target=_reader_proc, args=(handle, rq))
    reader.start()
    assert _expect(rq, "ready") == reader.pid
    return reader


def _reap(*procs: Any) -> None:
    for p in procs:
        if p is not None:
            p.join(T)
            if p.is_alive():
                p.kill()
                p.join(T)


def test_frames_queued_behind_a_stopped_reader_survive_the_writers_objects() -> None:
    ctx = mp.get_context("spawn")
    wq, rq, go, finish = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_writer_proc, args=(wq, go, finish))
    writer.start()
    reader = None
    try:
        reader = _started_reader(ctx, _expect(wq, "handle"), rq)
        os.kill(reader.pid, signal.SIGSTOP)  # its socket stops reading: frames queue up
        try:
            go.set()
            assert _expect(wq, "sent") == 256
        finally:
            os.kill(reader.pid, signal.SIGCONT)
        wrong, tail = _expect(rq, "got")
        finish.set()
        assert (wrong, tail) == ([], "closed")
        assert _expect(wq, "done") is None
    finally:
        finish.set()
        _reap(writer, reader)
    assert writer.exitcode == 0 and reader is not None and reader.exitcode == 0


def _exiting_writer_proc(out: Any, go: Any) -> None:
    """Queue everything behind the stopped reader, close(), and exit at once (no
    finalizers): whatever libzmq still queues dies with the process."""
    try:
        w = MessageQueue(1, 0, connect_ip=LOOPBACK)
        _send_all_on_go(w, out, go)
        out.put(("sent", None))
        w.close()  # waits (up to its linger) until the remote reader acknowledged all
        out.put(("closed", None))
    except BaseException as exc:
        out.put(("error", repr(exc)))
    out.close()
    out.join_thread()  # the reports are out; then exit without finalizers
    os._exit(0)


def test_close_lets_a_remote_reader_receive_everything_before_the_process_exits() -> None:
    """Before the fix close() returned at once and the exiting process took the queued
    frames with it: the reader got a prefix, then "the writer is gone"."""
    ctx = mp.get_context("spawn")
    wq, rq, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    writer = ctx.Process(target=_exiting_writer_proc, args=(wq, go))
    writer.start()
    reader = None
    try:
        reader = _started_reader(ctx, _expect(wq, "handle"), rq)
        os.kill(reader.pid, signal.SIGSTOP)
        try:
            go.set()
            assert _expect(wq, "sent") is None
            writer.join(1.0)  # the old close() returned and the process exited by now
        finally:
            os.kill(reader.pid, signal.SIGCONT)
        assert _expect(rq, "got") == ([], "closed")
        assert _expect(wq, "closed") is None
    finally:
        _reap(writer, reader)
    assert writer.exitcode == 0 and reader is not None and reader.exitcode == 0
