"""A local reader's take and release, cut by a real signal at a function's entry.

CPython runs a pending signal's handler when a Python function starts (its first
instruction checks), so a signal sent at that moment raises before the function's
first line. Here a profile hook sends SIGUSR1 to this process as the named
function is entered, once; the handler raises. Two windows of a dequeue:

* the entry of ``ReaderCursor.release``, the message consumed and decoded: the
  interrupt leaves, the chunk is released all the same (the writer does not stall
  on it), and the next dequeue returns that message: nothing is lost;
* the return of ``ReaderCursor.take`` (the entry of the decode that follows it), the
  message not yet consumed: the next dequeue reads the chunk it still holds.

Before, the first left the chunk held for good (every later dequeue raised
MisuseError, the writer stalled on the chunk) and its message was lost; the
second left the reader refusing the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import CodeType

import pytest
from support.signals import (  # noqa: F401 (a fixture)
    Interrupt,
    assert_interrupted,
    signal_at_entry,
    sigusr1,
)

from verifiedring import MessageQueue
from verifiedring.cursors import ReaderCursor
from verifiedring.queue import wire

T = 10.0


@pytest.fixture
def queue() -> Iterator[tuple[MessageQueue, MessageQueue]]:
    """A writer and its one local reader (1 KiB chunks, 2 of them)."""
    w = MessageQueue(1, 1, [0], max_chunk_bytes=1024, max_chunks=2)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    yield w, r
    r.close()
    w.close()


def _dequeue_interrupted(r: MessageQueue, code: CodeType) -> None:
    assert_interrupted(lambda: r.dequeue(timeout=T), signal_at_entry(code))


@pytest.mark.usefixtures("sigusr1")
def test_an_interrupt_at_the_release_is_delivered_by_the_next_dequeue(
    queue: tuple[MessageQueue, MessageQueue]
) -> None:
    w, r = queue
    w.enqueue("a", timeout=T)
    w.enqueue("b", timeout=T)
    _dequeue_interrupted(r, ReaderCursor.release.__code__)
    w.enqueue("c", timeout=T)  # the writer needs "a"'s chunk (2 chunks): it was released
    assert [r.dequeue(timeout=T) for _ in range(3)] == ["a", "b", "c"]


@pytest.mark.usefixtures("sigusr1")
def test_an_interrupt_after_the_take_reads_the_held_chunk_next(
    queue: tuple[MessageQueue, MessageQueue]
) -> None:
    w, r = queue
    w.enqueue("a", timeout=T)
    w.enqueue("b", timeout=T)
    _dequeue_interrupted(r, wire.decode_chunk.__code__)  # right after take() returned
    assert [r.dequeue(timeout=T) for _ in range(2)] == ["a", "b"]
    w.enqueue("c", timeout=T)
    w.enqueue("d", timeout=T)
    assert [r.dequeue(timeout=T) for _ in range(2)] == ["c", "d"]
