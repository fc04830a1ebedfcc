"""After ``install()``, a worker's busy loop outlives its writer's shutdown as vLLM's does.

vLLM's reader never learns that the writer shut down: a worker's
``dequeue(indefinite=True)`` ends only when its own process is stopped (SIGTERM, the
death pipe's ``shutdown()``), and vLLM logs any error out of that loop as a crashed
worker ("WorkerProc failed", then "died unexpectedly": seen on the remote worker of
``make engine-check``'s two-host run). Under ``install()`` such a dequeue waits as for a
writer that sends nothing; everywhere else the writer's shutdown is a ClosedError.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from verifiedring import CancelledError, ClosedError, RingTimeoutError
from verifiedring.compat import vllm as shim
from verifiedring.compat.vllm import MessageQueue
from verifiedring.testing import wait_blocked

T = 10.0
LOOPBACK = "127.0.0.1"


@pytest.fixture
def installed() -> Iterator[None]:
    shim.install()
    try:
        yield
    finally:
        shim.uninstall()


def _shut_down_pair(n_remote: int) -> MessageQueue:
    """A reader that took the one message of a writer that then shut the queue down."""
    w = MessageQueue(1, 1 - n_remote, connect_ip=LOOPBACK if n_remote else None)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    w.enqueue("last")
    assert r.dequeue(T) == "last"
    w.close()  # SHUTDOWN(1): the reader's next dequeue sees it
    return r


@pytest.mark.parametrize("n_remote", [0, 1], ids=["local", "remote"])
@pytest.mark.usefixtures("installed")
def test_under_install_a_busy_loop_waits_out_the_writers_shutdown_until_cancelled(
    n_remote: int,
) -> None:
    r = _shut_down_pair(n_remote)
    cancel = threading.Event()
    raised: list[BaseException] = []

    def busy_loop() -> None:
        try:
            r.dequeue(indefinite=True, cancel=cancel)
        except BaseException as exc:
            raised.append(exc)

    t = threading.Thread(target=busy_loop, daemon=True)
    t.start()
    wait_blocked(t, T)  # waiting, not raising
    assert raised == []
    cancel.set()
    t.join(T)
    assert not t.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], CancelledError), raised
    r.close()


@pytest.mark.parametrize("n_remote", [0, 1], ids=["local", "remote"])
@pytest.mark.usefixtures("installed")
def test_under_install_shutdown_ends_the_wait_after_the_writers_shutdown(n_remote: int) -> None:
    """vLLM's death-pipe monitor calls shutdown() on the worker's queues once its
    executor is gone: the waiting busy loop ends, a remote reader's too (there is
    nothing left to wait for), as a cancel vLLM's worker loop takes for a clean exit."""
    r = _shut_down_pair(n_remote)
    raised: list[BaseException] = []

    def busy_loop() -> None:
        try:
            r.dequeue(indefinite=True)
        except BaseException as exc:
            raised.append(exc)

    t = threading.Thread(target=busy_loop, daemon=True)
    t.start()
    wait_blocked(t, T)
    r.shutdown()
    t.join(T)
    assert not t.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], CancelledError), raised
    assert str(raised[0]).endswith("the wait was cancelled: shutdown() was called")
    r.close()


@pytest.mark.usefixtures("installed")
def test_under_install_the_wait_after_shutdown_ends_at_its_timeout() -> None:
    r = _shut_down_pair(1)
    with pytest.raises(RingTimeoutError, match="the writer shut the queue down after 1 messages"):
        r.dequeue(0.2, indefinite=True)
    r.close()


@pytest.mark.parametrize("call", ["not indefinite", "closed by its owner"])
@pytest.mark.usefixtures("installed")
def test_under_install_other_calls_still_see_the_shutdown(call: str) -> None:
    r = _shut_down_pair(1)
    kwargs: dict[str, Any] = {"indefinite": call != "not indefinite"}
    if call == "closed by its owner":
        r.close()
    with pytest.raises(ClosedError):
        r.dequeue(T, **kwargs)
    r.close()


def test_without_install_the_busy_loop_is_told_the_writer_shut_down() -> None:
    r = _shut_down_pair(1)
    with pytest.raises(ClosedError, match="the writer shut the queue down after 1 messages"):
        r.dequeue(T, indefinite=True)
    r.close()
