"""The writer's end as vLLM means it: shutdown() only flags, close() tells the readers,
teardown does not wait for what is already acknowledged, acquire_write is in place."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_queue import T, Group

from verifiedring import ClosedError
from verifiedring.queue.lifecycle import WriterState
from verifiedring.testing import wait_blocked

CHUNKS = 4  # Group's ring: max_chunks=4


@pytest.fixture
def group() -> Iterator[Callable[..., Group]]:
    made: list[Group] = []

    def make(n_local: int = 1, n_remote: int = 0, **kw: Any) -> Group:
        g = Group(n_local, n_remote, **kw)
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()


def _fill(g: Group) -> int:
    """Enqueue until the writer's next enqueue has to wait (the ring is full, or the
    remote reader's window); how many were sent."""
    n = CHUNKS
    for i in range(n):
        g.writer.enqueue(i, timeout=T)
    return n


# --- shutdown() flags; close() tells -----------------------------------------------


@pytest.mark.parametrize("n_local,n_remote", [(1, 0), (0, 1)])
def test_shutdown_lets_a_blocked_enqueue_finish_and_a_later_one_arrive(
    group: Callable[..., Group], n_local: int, n_remote: int
) -> None:
    """vLLM's death monitor calls shutdown() while the output thread is inside
    enqueue: that enqueue completes, a later one is sent too; close() then sends
    SHUTDOWN and the reader raises ClosedError after the last message."""
    g = group(n_local, n_remote, remote_window=CHUNKS)
    w, (r,) = g.writer, g.readers
    sent = _fill(g)
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            w.enqueue("while shutting down", timeout=T)
        except BaseException as exc:  # noqa: BLE001 -- the assertion names it
            errors.append(exc)

    t = threading.Thread(target=blocked)
    t.start()
    wait_blocked(t, T)  # inside its wait: for a free chunk, or the remote reader's credit
    w.shutdown()
    assert w.shutting_down is True
    assert w.state is WriterState.CHUNK
    got = [r.dequeue(timeout=T) for _ in range(sent + 1)]
    t.join(T)
    assert not t.is_alive() and errors == []
    assert got == [0, 1, 2, 3, "while shutting down"]
    w.enqueue("after shutdown", timeout=T)
    assert r.dequeue(timeout=T) == "after shutdown"
    w.shutdown()  # idempotent
    w.close()
    with pytest.raises(ClosedError, match="after 6 messages"):
        r.dequeue(timeout=T)


def test_shutdown_before_the_handshake_and_after_close_only_flags() -> None:
    """As vLLM's, shutdown() is a flag at any time: before wait_until_ready() and
    after close() too (vLLM's executor calls it, then drops the queue)."""
    from verifiedring import MessageQueue

    w = MessageQueue(1, 1)
    w.shutdown()
    assert w.shutting_down is True and w.state is WriterState.HANDSHAKE
    w.close()
    w.shutdown()
    assert w.state is WriterState.CLOSED
