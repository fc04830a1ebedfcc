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

import contextlib
import os
import random
import signal
from collections.abc import Callable, Iterator
from typing import Any

from verifiedring import ClosedError, DecodeError, MessageQueue
from verifiedring.queue.curve import DEFAULT_HEARTBEAT_TIMEOUT
from verifiedring.testing.launcher import Channel, Supervisor, Task, channel

T = 20.0
LOOPBACK = "127.0.0.1"
N = 96
SIZE = 256 * 1024  # far above pyzmq's zero-copy threshold; 24 MiB in all, beyond TCP buffers
PAUSE = min(1.0, DEFAULT_HEARTBEAT_TIMEOUT / 2)  # how long the remote reader is stopped


def payload(k: int) -> Any:
    """Object ``k``: a top-level bytes (an out-of-band buffer part) or, for odd ``k``,
    a tuple holding one (a large pickle stream part)."""
    data = random.Random(k).randbytes(SIZE)
    return data if k % 2 == 0 else (k, data)


def _send_all_on_go(w: MessageQueue, line: Channel) -> None:
    """Hand out ``w``'s handle, wait for the reader and the test's go, send N payloads."""
    line.send(("handle", w.export_handle()))
    w.wait_until_ready(T)
    if line.recv(T) != "go":
        raise AssertionError("no go from the test")
    for k in range(N):
        w.enqueue(payload(k), timeout=T)


def _writer_proc() -> None:
    import zmq.utils.garbage

    line = channel()
    with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
        _send_all_on_go(w, line)
        zmq.utils.garbage.gc.stop()  # as at interpreter exit: its references dropped
        junk = [b"\xee" * (SIZE + n) for n in range(-64, 64) for _ in range(2)]
        line.send(("sent", len(junk)))
    # closed: its SHUTDOWN queues behind the frames, which flow while this process lives
    if line.recv(T) != "finish":
        raise AssertionError("no finish from the test")
    line.send(("done", None))


def _reader_proc() -> tuple[list[int], str]:
    """The messages that arrived wrong, and what ended the stream."""
    line = channel()
    with MessageQueue.create_from_handle(line.recv(T), 1) as q:
        q.wait_until_ready(T)
        line.send(("ready", os.getpid()))
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
        return wrong, tail


def _expect(line: Channel, tag: str) -> Any:
    got_tag, value = line.recv(T * 2)
    assert got_tag == tag, (got_tag, value)
    return value


@contextlib.contextmanager
def _writer_and_reader(writer: Callable[[], None]) -> Iterator[Supervisor]:
    """``writer`` and the reader process, running; the reader has the writer's handle
    and is past its handshake."""
    with Supervisor([Task(writer, name="writer"), Task(_reader_proc, name="reader")]) as run:
        run.channel("reader").send(_expect(run.channel("writer"), "handle"))
        assert _expect(run.channel("reader"), "ready") == run.pid("reader")
        yield run


def test_frames_queued_behind_a_stopped_reader_survive_the_writers_objects() -> None:
    with _writer_and_reader(_writer_proc) as run:
        wq = run.channel("writer")
        run.signal("reader", signal.SIGSTOP)  # its socket stops reading: frames queue up
        try:
            wq.send("go")
            assert _expect(wq, "sent") == 256
        finally:
            run.signal("reader", signal.SIGCONT)
        wq.send("finish")
        assert _expect(wq, "done") is None
        writer, reader = run.wait(T)
    assert writer.ok and writer.exitcode == 0, writer.describe()
    assert reader.ok and reader.exitcode == 0, reader.describe()
    assert reader.value == ([], "closed")


def _exiting_writer_proc() -> None:
    """Queue everything behind the stopped reader, close(), and exit at once (no
    finalizers): whatever libzmq still queues dies with the process."""
    line = channel()
    w = MessageQueue(1, 0, connect_ip=LOOPBACK)
    _send_all_on_go(w, line)
    line.send(("sent", None))
    w.close()  # waits (up to its linger) until the remote reader acknowledged all
    line.send(("closed", None))
    line.flush()  # the reports are out; then exit without finalizers
    os._exit(0)


def test_close_lets_a_remote_reader_receive_everything_before_the_process_exits() -> None:
    """Before the fix close() returned at once and the exiting process took the queued
    frames with it: the reader got a prefix, then "the writer is gone"."""
    with _writer_and_reader(_exiting_writer_proc) as run:
        wq = run.channel("writer")
        run.signal("reader", signal.SIGSTOP)
        try:
            wq.send("go")
            assert _expect(wq, "sent") is None
            # the old close() returned and the process exited by now; the pause stays
            # well inside the heartbeat's bound, past which a stopped reader counts as gone
            wq.poll(PAUSE)
        finally:
            run.signal("reader", signal.SIGCONT)
        assert _expect(wq, "closed") is None
        writer, reader = run.wait(T)
    assert writer.exitcode == 0, writer.describe()  # it exits without reporting: os._exit
    assert reader.ok and reader.exitcode == 0, reader.describe()
    assert reader.value == ([], "closed")
