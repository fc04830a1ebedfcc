"""An asynchronous exception in a ring with-block's exit: inside it before the publish
store, or at its very entry.

CPython delivers one (KeyboardInterrupt, a signal handler's exception) where it
checks for pending calls: at a fence call's return (FW3, FW4) or at the back edge
of the read-flag loop. ``spec/ring/RingBuffer.tla`` models each as a ``WriterAbort`` in
the ``"flags"``/``"publish"`` states: the chunk stays unpublished with some flags
cleared, the index stays, and the next write reuses the chunk. An observer that
raises before a step lands the exception at exactly those points.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from support.signals import (
    Interrupt,
    InterruptBefore,
    signal_at_entry,
    sigusr1,  # noqa: F401 (a fixture, used by name)
)

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


def _cut_exit(sent: list[int]) -> None:
    sys.setprofile(None)
    assert sent == [1], "the signal was not sent: the exit was not entered"


@pytest.mark.usefixtures("sigusr1")
def test_a_write_whose_exit_is_cut_at_its_entry_is_let_go(
    ring: ShmRingBuffer, attached: list[ShmRingBuffer]
) -> None:
    w = ring.writer()
    readers = [attached[0].reader(0), attached[1].reader(1)]
    exit_code = type(w.acquire_write(5)).__exit__.__code__  # what the with calls
    sent = signal_at_entry(exit_code)
    try:
        with pytest.raises(Interrupt), w.acquire_write(5) as buf:
            buf[:1] = b"X"  # the body completes; its exit never runs
    finally:
        _cut_exit(sent)
    assert not w.holding and w.index == 0  # let go, unpublished
    for r in readers:
        with pytest.raises(RingTimeoutError):
            r.acquire_read(0.05)
    with w.acquire_write(5) as buf:  # the next write reuses chunk 0
        buf[:1] = b"Y"
    for r in readers:
        with r.acquire_read(5) as got:
            assert bytes(got[:1]) == b"Y"
        with pytest.raises(RingTimeoutError):
            r.acquire_read(0.05)  # exactly once


@pytest.mark.usefixtures("sigusr1")
def test_a_read_whose_exit_is_cut_at_its_entry_is_released(
    ring: ShmRingBuffer, attached: list[ShmRingBuffer]
) -> None:
    w = ring.writer()
    r0, r1 = attached[0].reader(0), attached[1].reader(1)
    with w.acquire_write(5) as buf:
        buf[:1] = b"A"
    exit_code = type(r0.acquire_read(5)).__exit__.__code__
    sent = signal_at_entry(exit_code)
    try:
        with pytest.raises(Interrupt), r0.acquire_read(5) as got:
            assert bytes(got[:1]) == b"A"
    finally:
        _cut_exit(sent)
    assert not r0.holding and r0.index == 1  # released all the same
    with r1.acquire_read(5) as got:
        assert bytes(got[:1]) == b"A"
    for text in (b"B", b"C"):  # C reuses chunk 0: free only once both released it
        with w.acquire_write(0.5) as buf:
            buf[:1] = text
    for r in (r0, r1):
        for text in (b"B", b"C"):
            with r.acquire_read(5) as got:
                assert bytes(got[:1]) == text
