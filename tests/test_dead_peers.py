"""A dead peer is named, not waited out: also with ``timeout=None``.

Each case kills one process (SIGKILL) while another waits for it with no timeout,
and checks that the waiter raises BrokenPeerError naming the dead one (rank, pid,
host) well within a generous bound, and that nothing else is disturbed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

import pytest

from verifiedring import BrokenPeerError, Handle, MessageQueue
from verifiedring import cursors as cursors_module
from verifiedring.queue import writer_watch
from verifiedring.queue.local_reader import LocalReader
from verifiedring.queue.writer_watch import WriterWatch
from verifiedring.testing.launcher import Supervisor, Task, channel
from verifiedring.waiting import futex_wait

LOOPBACK = "127.0.0.1"
T = 20.0
BOUND = 10.0  # generous: the mechanisms answer within about a second


def _writer_proc(n_reader: int, n_local: int) -> None:
    with MessageQueue(
        n_reader, n_local, list(range(n_local)), connect_ip=LOOPBACK, max_chunks=2
    ) as w:
        channel().send(w.export_handle())
        w.wait_until_ready(T)
        w.enqueue("first", timeout=T)
        time.sleep(T)  # the test kills this process here


def _reader_proc(handle: Handle, rank: int) -> None:
    with MessageQueue.create_from_handle(handle, rank) as r:
        r.wait_until_ready(T)
        channel().send(r.dequeue(T))
        time.sleep(T)  # the test kills this process here


def _raises_within(call: Any, bound: float) -> BrokenPeerError:
    result: list[BaseException | None] = [None]

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            result[0] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(bound)
    assert not t.is_alive(), f"still waiting after {bound} s: the dead peer was waited out"
    assert isinstance(result[0], BrokenPeerError), repr(result[0])
    return result[0]


@pytest.mark.parametrize("local", [True, False], ids=["local", "remote"])
def test_reader_of_a_killed_writer_is_told(local: bool) -> None:
    with Supervisor([Task(_writer_proc, (1, 1 if local else 0), name="writer")]) as run:
        pid = run.pid("writer")
        handle = run.channel("writer").recv(T)
        with MessageQueue.create_from_handle(handle, 0) as r:
            r.wait_until_ready(T)
            assert r.dequeue(T) == "first"
            run.signal("writer", signal.SIGKILL)
            err = _raises_within(lambda: r.dequeue(None), BOUND)
            assert f"the writer (pid {pid} on host {socket.gethostname()}) is gone" in str(err)
            if not local:  # told by its connection, closed once heartbeats stopped
                assert handle.curve is not None
                ms = handle.curve.heartbeat_timeout_ms
                assert f"the connection to it closed; heartbeat timeout {ms} ms" in str(err)
            with pytest.raises(BrokenPeerError, match="is gone"):
                r.dequeue(0)  # and it stays that way


@pytest.mark.parametrize(
    ("local", "in_place"), [(True, False), (False, False), (True, True)],
    ids=["local", "remote", "local-acquire_write"],
)
def test_writer_waiting_for_a_killed_reader_is_told(local: bool, in_place: bool) -> None:
    with MessageQueue(
        2, 2 if local else 0, [0, 1] if local else [], connect_ip=LOOPBACK, max_chunks=2,
        remote_window=4,
    ) as w:
        h = w.export_handle()
        tasks = [Task(_reader_proc, (h, rank), name=f"rank {rank}") for rank in (0, 1)]
        with Supervisor(tasks) as run:
            w.wait_until_ready(T)
            w.enqueue("one", timeout=T)
            assert [run.channel(n).recv(T) for n in run.names] == ["one", "one"]
            pid = run.pid("rank 1")
            run.signal("rank 1", signal.SIGKILL)
            with pytest.raises(BrokenPeerError):
                run.channel("rank 1").recv(T)  # once it is gone

            def fill() -> None:
                while True:  # the ring (2 chunks) or the window (4) fills, then it waits
                    if in_place:
                        with w.acquire_write(timeout=None) as buf:
                            buf[0] = 1
                    else:
                        w.enqueue("more", timeout=None)

            err = _raises_within(fill, BOUND)
            assert f"reader rank 1 (pid {pid} on host {socket.gethostname()})" in str(err)
            assert "is gone" in str(err)
            with pytest.raises(BrokenPeerError, match="broken since a reader left"):
                w.enqueue("after", timeout=0)


def test_a_local_reader_deep_in_an_idle_block_is_told_its_writer_died(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel closes the dead writer's end of the local socket; the reader's writer
    watch cuts its sleep at once. The reader is in its 3.2 s block (idle blocks double:
    0.1 .. 3.2 s, up to 10 s with the watch) and is told well inside it (the
    reader's own grace for frames still arriving is 0.5 s). Before, it slept the
    block out."""
    blocks: list[float] = []
    deep = threading.Event()

    def counting(address: int, expected: int, timeout: float) -> None:
        blocks.append(timeout)
        if len(blocks) == 6:
            deep.set()
        futex_wait(address, expected, timeout)

    monkeypatch.setattr(cursors_module, "futex_wait", counting)
    with Supervisor([Task(_writer_proc, (1, 1), name="writer")]) as run:
        pid = run.pid("writer")
        with MessageQueue.create_from_handle(run.channel("writer").recv(T), 0) as r:
            r.wait_until_ready(T)
            assert r.dequeue(T) == "first"
            result: list[BaseException] = []

            def idle() -> None:
                try:
                    r.dequeue(None)
                except BaseException as exc:
                    result.append(exc)

            t = threading.Thread(target=idle, daemon=True)
            t.start()
            assert deep.wait(T), blocks
            run.signal("writer", signal.SIGKILL)
            t.join(2.5)  # inside the 3.2 s block
            assert not t.is_alive(), f"still asleep; its blocks: {blocks}"
            assert blocks[:6] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2], blocks
            assert len(result) == 1 and isinstance(result[0], BrokenPeerError), result
            assert f"the writer (pid {pid} on host {socket.gethostname()}) is gone" in str(
                result[0]
            )


def test_closing_a_local_reader_ends_its_writer_watch() -> None:
    """One watch thread per local reader, and none left after close()."""
    before = {t.name for t in threading.enumerate()}
    with MessageQueue(1, 1) as w:
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
        watches = [t for t in threading.enumerate() if t.name.startswith("verifiedring watch")]
        assert len(watches) == 1 and watches[0].name not in before
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        r.close()
        assert not watches[0].is_alive()
    assert {t.name for t in threading.enumerate()} <= before


#: A process that leaves its local reader open at exit (as vLLM's workers do). Its first
#: atexit handler runs last: after every other one, as the interpreter's teardown begins.
_LEFT_OPEN = """
import atexit, sys, threading

def at_teardown():
    watches = [t for t in threading.enumerate() if t.name.startswith("verifiedring watch")]
    print("watches running at teardown:", [t.name for t in watches if t.is_alive()])
    sys.stdout.flush()

atexit.register(at_teardown)

from verifiedring import MessageQueue

w = MessageQueue(1, 1)
r = MessageQueue.create_from_handle(w.export_handle(), 0)
w.wait_until_ready(20.0)
r.wait_until_ready(20.0)
w.enqueue("one", timeout=20.0)
assert r.dequeue(20.0) == "one"
print("left open")
"""


def test_an_unclosed_local_readers_watch_has_ended_before_the_interpreter_tears_down() -> None:
    """No watch thread sits in zmq_poll while the interpreter tears its sockets down."""
    done = subprocess.run(
        [sys.executable, "-c", _LEFT_OPEN], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["left open", "watches running at teardown: []"]


def _watched_pair() -> tuple[MessageQueue, LocalReader, WriterWatch]:
    """A ready writer and local reader, and the reader's writer watch."""
    w = MessageQueue(1, 1)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    assert isinstance(r, LocalReader)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    watch = r._path._writer_watch
    assert watch is not None
    return w, r, watch


def test_a_watch_close_that_runs_out_of_time_leaves_the_threads_sockets_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """close() never closes a socket the watch thread may still poll: the thread does,
    as it ends."""
    monkeypatch.setattr(writer_watch, "JOIN_TIMEOUT", 0.2)
    entered, release = threading.Event(), threading.Event()

    class SlowLook:
        def on_lost(self) -> None:
            entered.set()
            release.wait(T)

    look = SlowLook()
    w, r, watch = _watched_pair()
    watch._on_lost = weakref.WeakMethod(look.on_lost)
    w.close()  # the writer's socket closes: the watch's thread calls on_lost, which waits
    assert entered.wait(T)
    watch.close()  # its join runs out while the thread is in on_lost
    assert watch._thread.is_alive()
    assert (watch._events.closed, watch._stop_in.closed, watch._stop_out.closed) == (
        False, False, True,
    )
    release.set()
    watch._thread.join(T)
    assert not watch._thread.is_alive()
    assert (watch._events.closed, watch._stop_in.closed) == (True, True)
    r.close()


def test_a_watch_close_racing_its_threads_own_end_does_not_raise() -> None:
    """The watch thread may end (its stop flag seen at a poll's bound, its end of the
    stop pair closed) between close()'s look at it and close()'s stop message: that
    send finds no peer and must not raise (seen once in CI: zmq.error.Again out of a
    reader's close())."""
    w, r, watch = _watched_pair()
    watch._stopping.set()
    thread = watch._thread
    thread.join(T)  # it ended by its flag, its sockets closed by itself
    assert not thread.is_alive() and watch._stop_in.closed

    class SeenAlive:  # close()'s look came before the thread's end
        def is_alive(self) -> bool:
            return True

        def join(self, timeout: float | None = None) -> None:
            thread.join(timeout)

    watch._thread = SeenAlive()  # type: ignore[assignment]
    watch.close()
    assert watch._stop_out.closed
    r.close()
    w.close()


def test_a_forked_child_leaves_its_parents_watches_alone_at_exit() -> None:
    """The exit hook ends this process's watches only: a child forked from a process
    with a running watch exits without touching the parent's sockets."""
    with MessageQueue(1, 1) as w:
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        assert len(writer_watch._live) == 1
        pid = os.fork()
        if pid == 0:  # the child: what its exit hook would close
            os._exit(len(writer_watch._live))
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert len(writer_watch._live) == 1
        r.close()
        assert len(writer_watch._live) == 0
