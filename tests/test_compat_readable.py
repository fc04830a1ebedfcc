"""vLLM 0.34's ``readable()`` / ``spin_until_readable(pending, deadline)``, made as its
call sites make them: the executor's ``FutureWrapper`` (``response_ready``,
``wait_for_response``) and ``EngineCore._wait_for_output`` (a ``deque`` another thread
appends to, a deadline one second out, then a blocking ``dequeue``)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from verifiedring import CancelledError, MisuseError
from verifiedring.compat import vllm as shim
from verifiedring.compat.vllm import MessageQueue
from verifiedring.queue import readiness
from verifiedring.testing import wait_blocked

T = 10.0
LOOPBACK = "127.0.0.1"


@pytest.fixture
def ends() -> Iterator[tuple[Any, Any, Any]]:
    """A writer, its local reader (rank 0) and its remote reader (rank 1), ready."""
    w = MessageQueue(2, 1, [0], max_chunk_bytes=1024, max_chunks=4, connect_ip=LOOPBACK)
    h = w.export_handle()
    local, remote = (MessageQueue.create_from_handle(h, r) for r in (0, 1))
    try:
        for q in (w, local, remote):
            q.wait_until_ready(T)
        yield w, local, remote
    finally:
        for q in (local, remote, w):
            q.close()


def _readable_soon(q: Any) -> bool:
    """``readable()`` on a remote reader, once the frame sent has had time to arrive
    (a blocking poll of its socket first, which consumes nothing either)."""
    q._path.socket.poll(timeout=int(T * 1000))
    return bool(q.readable())


def test_readable_is_a_look_that_consumes_nothing_on_both_reader_roles(
    ends: tuple[Any, Any, Any],
) -> None:
    w, local, remote = ends
    assert [local.readable(), remote.readable()] == [False, False]
    w.enqueue(("step", 1))
    assert local.readable() and local.readable()  # twice: nothing consumed
    assert _readable_soon(remote) and remote.readable()
    assert [local.dequeue(T), remote.dequeue(T)] == [("step", 1), ("step", 1)]
    assert [local.readable(), remote.readable()] == [False, False]


def test_readable_and_spin_until_readable_on_the_writer_raise(
    ends: tuple[Any, Any, Any],
) -> None:
    w, _, _ = ends
    with pytest.raises(MisuseError, match=r"readable\(\) is not a call of the writer"):
        w.readable()
    with pytest.raises(MisuseError, match=r"spin_until_readable\(\) is not a call of the writer"):
        w.spin_until_readable(collections.deque(), time.monotonic() + T)


def test_readable_raises_cancelled_once_shutting_down(ends: tuple[Any, Any, Any]) -> None:
    w, local, remote = ends
    w.enqueue("published before the shutdown")
    for q in (local, remote):
        q.shutdown()
        with pytest.raises(RuntimeError, match="cancelled") as got:
            q.readable()
        assert isinstance(got.value, CancelledError)
    assert local.dequeue(T) == "published before the shutdown"  # the ring is read first


def test_spin_until_readable_returns_once_a_message_is_published(
    ends: tuple[Any, Any, Any],
) -> None:
    w, local, _ = ends
    pending: collections.deque[int] = collections.deque()
    t, out = _in_thread(lambda: local.spin_until_readable(pending, time.monotonic() + 60))
    wait_blocked(t, T)  # asleep in the ring's futex
    w.enqueue("the step's output")
    t.join(T)
    assert out == [None] and local.readable() and not pending
    assert local.dequeue(T) == "the step's output"


def test_spin_until_readable_returns_once_another_thread_appends_to_pending(
    ends: tuple[Any, Any, Any],
) -> None:
    _, local, _ = ends
    pending: collections.deque[str] = collections.deque()
    t, out = _in_thread(lambda: local.spin_until_readable(pending, time.monotonic() + 60))
    wait_blocked(t, T)
    pending.append("a new request")  # nothing wakes the futex: its blocks are short
    t.join(T)
    assert out == [None] and list(pending) == ["a new request"] and not local.readable()


def test_spin_until_readable_returns_at_the_deadline_with_nothing_ready(
    ends: tuple[Any, Any, Any],
) -> None:
    _, local, remote = ends
    for q in (local, remote):
        deadline = time.monotonic() + 0.05
        q.spin_until_readable(collections.deque(), deadline)
        if q is local:  # a remote reader polls once, for at most REMOTE_POLL_WAIT_MS
            assert time.monotonic() >= deadline
        assert not q.readable()


def test_spin_until_readable_ends_when_another_thread_calls_shutdown(
    ends: tuple[Any, Any, Any],
) -> None:
    _, local, _ = ends
    t, out = _in_thread(
        lambda: local.spin_until_readable(collections.deque(), time.monotonic() + 60)
    )
    wait_blocked(t, T)
    local.shutdown()
    t.join(T)
    assert out == [None]
    with pytest.raises(CancelledError, match="cancelled"):
        local.readable()


def test_a_remote_reader_polls_for_the_modules_remote_poll_wait(
    ends: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    w, _, remote = ends
    assert shim.REMOTE_POLL_WAIT_MS == readiness.REMOTE_POLL_WAIT_MS == 1
    monkeypatch.setattr(shim, "REMOTE_POLL_WAIT_MS", 7)
    assert remote.poll_wait_ms() == 7  # read at each call
    assert readiness.remote_poll_ms(time.monotonic() + 60, remote.poll_wait_ms()) == 7
    assert readiness.remote_poll_ms(time.monotonic() - 1, 7) == 0  # never past the deadline
    monkeypatch.setattr(shim, "REMOTE_POLL_WAIT_MS", -1)
    with pytest.raises(MisuseError, match="REMOTE_POLL_WAIT_MS=-1"):
        remote.spin_until_readable(collections.deque(), time.monotonic() + 60)
    remote.spin_until_readable(["pending"], time.monotonic() + 60)  # no poll at all
    monkeypatch.setattr(shim, "REMOTE_POLL_WAIT_MS", 10_000)
    t, out = _in_thread(
        lambda: remote.spin_until_readable(collections.deque(), time.monotonic() + 60)
    )
    w.enqueue("arrives during the poll")
    t.join(T)
    assert out == [None] and remote.readable()
    assert remote.dequeue(T) == "arrives during the poll"


def test_the_notify_poll_interval_is_read_at_each_read_of_a_local_reader(
    ends: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    w, local, _ = ends
    assert shim.SHM_NOTIFY_POLL_INTERVAL_S == 2.0
    sc = local._spin_condition
    sock = sc.local_notify_socket
    w.enqueue(0)
    local.dequeue(T)
    assert sock.polls == 0  # within the interval of the reader's start
    monkeypatch.setattr(shim, "SHM_NOTIFY_POLL_INTERVAL_S", 0)
    for i in (1, 2):
        w.enqueue(i)
        assert local.dequeue(T) == i
    assert sock.polls == 2 and sc.last_notify_poll == sc.last_read


# --- vLLM 0.34's call sites, replayed ------------------------------------------------


def _wait_for_output(
    response_mqs: list[Any], pending: collections.deque[str], handled: list[str],
    spin_s: float,
) -> list[Any]:
    """EngineCore._wait_for_output over a FutureWrapper of ``response_mqs``: while not
    every queue is readable, handle what another thread appended to ``pending`` or spin
    on the first unreadable queue, until ``spin_s`` has passed; then dequeue from each."""
    spin_deadline = time.monotonic() + spin_s
    while not all(mq.readable() for mq in response_mqs):
        if pending:
            handled.append(pending.popleft())
        elif time.monotonic() < spin_deadline:
            for mq in response_mqs:
                if not mq.readable():
                    mq.spin_until_readable(pending, spin_deadline)
                    break
        else:
            break  # a long step: block in dequeue
    return [mq.dequeue(timeout=T) for mq in response_mqs]


@pytest.fixture
def workers() -> Iterator[tuple[list[Any], list[Any]]]:
    """Two workers' response queues (``MessageQueue(1, 1)``, a writer each) and the
    executor's reader of each."""
    writers = [MessageQueue(1, 1) for _ in range(2)]
    readers = [MessageQueue.create_from_handle(w.export_handle(), 0) for w in writers]
    try:
        for q in (*writers, *readers):
            q.wait_until_ready(T)
        yield writers, readers
    finally:
        for q in (*readers, *writers):
            q.close()


def test_the_engines_step_loop_handles_inputs_while_the_workers_compute(
    workers: tuple[list[Any], list[Any]],
) -> None:
    writers, readers = workers
    pending: collections.deque[str] = collections.deque()
    handled: list[str] = []
    t, out = _in_thread(lambda: _wait_for_output(readers, pending, handled, 60.0))
    wait_blocked(t, T)
    pending.append("ADD request 1")  # the input thread
    _until(lambda: handled == ["ADD request 1"])
    writers[0].enqueue(("SUCCESS", "rank 0's output"))
    pending.append("ABORT request 0")
    _until(lambda: len(handled) == 2)  # handled while rank 1 still computes
    writers[1].enqueue(("SUCCESS", "rank 1's output"))
    t.join(T)
    assert out == [[("SUCCESS", "rank 0's output"), ("SUCCESS", "rank 1's output")]]
    assert handled == ["ADD request 1", "ABORT request 0"]


def test_a_long_step_falls_back_to_a_blocking_dequeue_after_the_spin(
    workers: tuple[list[Any], list[Any]],
) -> None:
    writers, readers = workers
    t, out = _in_thread(lambda: _wait_for_output(readers, collections.deque(), [], 0.0))
    wait_blocked(t, T)  # no spin left: blocked in rank 0's dequeue
    for rank, w in enumerate(writers):
        w.enqueue(rank)
    t.join(T)
    assert out == [[0, 1]]


def _until(seen: Callable[[], bool]) -> None:
    """Return once ``seen()`` (state the loop's thread changes), within ``T`` seconds."""
    end = time.monotonic() + T
    while not seen():
        assert time.monotonic() < end, "the step loop never got there"
        time.sleep(1e-3)


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out

