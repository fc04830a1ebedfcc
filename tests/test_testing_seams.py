"""The seams of verifiedring.testing that stand in for sleeps: ``wait_blocked`` (true only
while the other side really is inside its wait) and the Supervisor's per-task reach
(``pid``, ``signal``, a channel of its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from verifiedring import BrokenPeerError, MisuseError, RingHandle, ShmRingBuffer
from verifiedring.testing import wait_blocked
from verifiedring.testing.blocked import ReaderAsleep
from verifiedring.testing.launcher import DIED, OK, Supervisor, Task, channel
from verifiedring.waiting import SLEEP_KIND

T = 10.0
SHORT = 0.5  # how long a negative case looks for a block that is not there

needs_futex = pytest.mark.skipif(SLEEP_KIND != "futex", reason="no futex here")


@pytest.fixture
def ring() -> Iterator[ShmRingBuffer]:
    with ShmRingBuffer(1, 64, 2) as r:
        yield r


def test_a_thread_waiting_for_a_chunk_is_blocked(ring: ShmRingBuffer) -> None:
    writer = ring.writer()
    got: list[bytes] = []
    with ShmRingBuffer.attach(ring.handle()) as theirs:
        reader = theirs.reader(0)

        def read() -> None:
            with reader.acquire_read(T) as buf:
                got.append(bytes(buf[:2]))

        t = threading.Thread(target=read, name="reader")
        t.start()
        wait_blocked(t, T)
        assert not got, "blocked, yet it read"
        with writer.acquire_write(T) as buf:
            buf[:2] = b"ok"
        t.join(T)
    assert got == [b"ok"]


def test_a_thread_that_is_busy_or_sleeping_elsewhere_is_not_blocked() -> None:
    """Running Python, or asleep outside the library's waits (a time.sleep of its own):
    neither is a wait for the other side."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    def nap() -> None:
        stop.wait(T)

    threads = [threading.Thread(target=f, name=f.__name__) for f in (spin, nap)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            with pytest.raises(TimeoutError, match=rf"thread '{t.name}' inside a wait_for"):
                wait_blocked(t, SHORT)
    finally:
        stop.set()
        for t in threads:
            t.join(T)


def test_a_thread_that_ends_without_blocking_is_reported_at_once() -> None:
    t = threading.Thread(target=lambda: None, name="quick")
    t.start()
    t.join(T)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="quick ended without blocking"):
        wait_blocked(t, T)
    assert time.monotonic() - started < T


def test_a_thread_not_started_is_misuse() -> None:
    with pytest.raises(MisuseError, match="not started"):
        wait_blocked(threading.Thread(target=lambda: None, name="idle"), SHORT)


def _idle_reader(handle: RingHandle) -> str:
    with ShmRingBuffer.attach(handle) as r:
        reader = r.reader(0)
        channel().send("attached")
        with reader.acquire_read(T) as buf:
            return bytes(buf[:4]).decode()


@needs_futex
def test_a_reader_process_asleep_on_its_word_is_blocked(ring: ShmRingBuffer) -> None:
    asleep = ReaderAsleep(ring, 0)
    with pytest.raises(TimeoutError, match=r"reader 0 of ring .* asleep on its word"):
        wait_blocked(asleep, SHORT)  # nobody reads yet
    with Supervisor([Task(_idle_reader, (ring.handle(),), name="reader")]) as run:
        assert run.channel("reader").recv(T) == "attached"
        wait_blocked(ReaderAsleep(ring, 0, pid=run.pid("reader")), T)
        with ring.writer().acquire_write(T) as buf:
            buf[:4] = b"woke"
        (outcome,) = run.wait(T)
    assert outcome.status == OK and outcome.value == "woke", outcome.describe()


def _echo() -> None:
    ch = channel()
    ch.send(("pid", os.getpid()))
    while (msg := ch.recv(T)) != "stop":
        ch.send(msg * 2)


def _parked() -> None:
    channel().send("parked")
    time.sleep(T)


def test_supervisor_reaches_each_task_by_name() -> None:
    tasks = [Task(_echo, name="echo"), Task(_parked, name="parked")]
    with Supervisor(tasks) as run:
        echo = run.channel("echo")
        assert echo.recv(T) == ("pid", run.pid("echo"))
        echo.send(21)
        assert echo.recv(T) == 42
        with pytest.raises(TimeoutError, match="no message from echo"):
            echo.recv(0.05)
        assert run.channel("parked").recv(T) == "parked"
        run.signal("parked", signal.SIGKILL)
        with pytest.raises(BrokenPeerError, match="parked has gone"):
            run.channel("parked").recv(T)
        echo.send("stop")
        outcomes = run.wait(T)
    assert [o.status for o in outcomes] == [OK, DIED], [o.describe() for o in outcomes]
    assert outcomes[1].exitcode == -signal.SIGKILL
    with pytest.raises(MisuseError, match="no task named 'nobody'"):
        run.pid("nobody")


def _last_words() -> None:
    line = channel()
    line.send(b"x" * 100_000)  # more than a pipe holds: a send never waits for the reader
    line.send("bye")
    line.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def test_what_a_task_flushed_before_dying_arrives() -> None:
    with Supervisor([Task(_last_words, name="dying")]) as run:
        line = run.channel("dying")
        assert line.recv(T) == b"x" * 100_000
        assert line.recv(T) == "bye"
        with pytest.raises(BrokenPeerError, match="dying has gone"):
            line.recv(T)
        (outcome,) = run.wait(T)
    assert outcome.status == DIED and outcome.exitcode == -signal.SIGKILL


def test_channel_outside_a_task_and_duplicate_names_are_misuse() -> None:
    with pytest.raises(MisuseError, match="not inside a task"):
        channel()
    with pytest.raises(MisuseError, match="must differ"):
        Supervisor([Task(_parked, name="a"), Task(_parked, name="a")])


_FORKED_WAIT = """
import os, sys, threading
from verifiedring import ShmRingBuffer
from verifiedring.testing import wait_blocked

pid = os.fork()
if pid == 0:
    code = 1
    try:
        with ShmRingBuffer(1, 64, 2) as ring, ShmRingBuffer.attach(ring.handle()) as readers:
            w, r = ring.writer(), readers.reader(0, wake_on_publish=False)
            main = threading.current_thread()  # the thread that forked: a stale native_id

            def write():
                wait_blocked(main, 5)
                with w.acquire_write(5) as buf:
                    buf[:4] = b"late"

            t = threading.Thread(target=write)
            t.start()
            with r.acquire_read(10) as buf:
                code = 0 if bytes(buf[:4]) == b"late" else 2
            t.join(10)
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_the_thread_that_forked_is_seen_blocked_in_the_child() -> None:
    """CPython 3.11 keeps the parent's ``native_id`` on the thread that forked; the
    child's look at that thread's task went to the parent's id and never saw it asleep
    (the cause of a test that failed inside mutmut's forked workers only)."""
    done = subprocess.run([sys.executable, "-c", _FORKED_WAIT], timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
