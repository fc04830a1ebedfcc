"""An asynchronous exception inside WriterCursor.__exit__ before the publish store.

CPython delivers one (KeyboardInterrupt, a signal handler's exception) where it
checks for pending calls: at a fence call's return (FW3, FW4) or at the back edge
of the read-flag loop. ``spec/RingBuffer.tla`` models each as a ``WriterAbort`` in
the ``"flags"``/``"publish"`` states: the chunk stays unpublished with some flags
cleared, the index stays, and the next write reuses the chunk. An observer that
raises before a step lands the exception at exactly those points.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.signals import Interrupt, InterruptBefore

from verifiedring import RingTimeoutError, ShmRingBuffer
from verifiedring.steps import WRITER_CLEAR_READ_FLAG, WRITER_PUBLISH


@pytest.fixture
def ring() -> Iterator[ShmRingBuffer]:
    r = ShmRingBuffer(2, 64, 2)
    yield r
    r.close()


@pytest.fixture
def attached(ring: ShmRingBuffer) -> Iterator[list[ShmRingBuffer]]:
    views = [ShmRingBuffer.attach(ring.handle()) for _ in range(2)]
    yield views
    for v in views:
        v.close()


@pytest.mark.parametrize(
    ("action", "reader"),
    [(WRITER_CLEAR_READ_FLAG, 1), (WRITER_PUBLISH, None)],
    ids=["between-flag-clears", "at-FW4"],
)
def test_a_write_interrupted_inside_exit_stays_unpublished(
    ring: ShmRingBuffer, attached: list[ShmRingBuffer], action: str, reader: int | None
) -> None:
    interrupt = InterruptBefore(action, reader)
    w = ring.writer(observer=interrupt)
    readers = [attached[0].reader(0), attached[1].reader(1)]
    for lap in range(2):  # both chunks once: the next write is on a later lap
        with w.acquire_write(5) as buf:
            buf[:1] = bytes([lap])
        for r in readers:
            with r.acquire_read(5) as got:
                assert got[0] == lap
    interrupt.armed = True
    with pytest.raises(Interrupt), w.acquire_write(5) as buf:
        buf[:1] = b"X"  # the previous lap's chunk 0 is being rewritten
    assert w.index == 0
    for r in readers:  # nothing published: the torn chunk is invisible to both
        with pytest.raises(RingTimeoutError):
            r.acquire_read(0.05)
    with w.acquire_write(5) as buf:  # the retry reuses chunk 0
        buf[:1] = b"Y"
    assert w.index == 1
    for r in readers:
        with r.acquire_read(5) as got:
            assert bytes(got[:1]) == b"Y"
        with pytest.raises(RingTimeoutError):
            r.acquire_read(0.05)  # exactly once
