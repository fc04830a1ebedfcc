"""The exact words of misuse errors and reprs, which say what a user did wrong
(mutants nobody chose, tests/mutation/REPORT.md: each of these texts survived a mutant)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from fractions import Fraction

import numpy
import pytest
from support.groups import Group

from verifiedring import BusyError, MisuseError, ShmRingBuffer
from verifiedring.waiting import _seconds, to_ms


def test_a_call_of_the_other_role_names_the_call_and_the_role(
    group: Callable[..., Group],
) -> None:
    g = group(1)
    pid = os.getpid()
    with pytest.raises(MisuseError) as info:
        g.writer.dequeue(timeout=0)
    assert str(info.value) == f"writer (pid {pid}): dequeue() is not a call of the writer"
    with pytest.raises(MisuseError) as info:
        g.readers[0].enqueue(1)
    assert str(info.value) == (
        f"local reader rank 1 (pid {pid}): enqueue() is not a call of a reader"
    )


def test_ring_and_cursor_reprs_say_the_role_and_the_state() -> None:
    with ShmRingBuffer(1, 64, 2) as ring:
        name = ring.name
        assert repr(ring) == (
            f"<ShmRingBuffer {name!r} 1 readers x 2 chunks of 64 bytes, no role yet>"
        )
        w = ring.writer()
        assert repr(w) == f"<WriterCursor writer of ring {name!r} chunk 0 idle>"
        with w.acquire_write(1):
            assert repr(w) == f"<WriterCursor writer of ring {name!r} chunk 0 holding>"
            with pytest.raises(MisuseError) as info, w.acquire_write(1):
                pass
    assert str(info.value) == (
        f"writer of ring {name!r} already holds chunk 0: finish the current with-block "
        "before acquiring again"
    )


def test_a_timeout_of_another_numeric_type_keeps_its_kind() -> None:
    whole = _seconds(numpy.int64(2))
    half = _seconds(Fraction(1, 2))
    assert (whole, type(whole)) == (2, int)
    assert (half, type(half)) == (0.5, float)


def test_acquire_read_of_an_object_names_its_type_and_that_it_was_consumed(
    group: Callable[..., Group],
) -> None:
    g = group(1, 1)
    pid = os.getpid()
    g.writer.enqueue({"not": "x" * 5000}, timeout=10)  # overflow: not in one chunk
    g.writer.enqueue("next", timeout=10)
    for r, who in zip(g.readers, ("local reader rank 1", "remote reader rank 2"), strict=True):
        with pytest.raises(MisuseError) as info, r.acquire_read(10):
            pass
        assert str(info.value) == (
            f"{who} (pid {pid}): acquire_read() got an object of type dict, not the bytes "
            "of an acquire_write(); it was consumed (use dequeue())"
        )
        assert r.dequeue(10) == "next"


def test_a_call_from_a_second_thread_names_the_call_and_the_rule(
    group: Callable[..., Group],
) -> None:
    g = group(1)
    pid = os.getpid()
    with g.writer.acquire_write(10), pytest.raises(BusyError) as info:
        g.writer.enqueue("nested", timeout=10)
    assert str(info.value) == (
        f"writer (pid {pid}): enqueue() called while another thread is inside this end's "
        "enqueue() or dequeue(): a queue end is used from one thread"
    )


def test_a_half_built_queue_end_has_a_repr(group: Callable[..., Group]) -> None:
    """What a debugger shows for ``self`` on the first line of ``__init__``."""
    g = group(1)
    cls = type(g.readers[0])
    assert repr(cls.__new__(cls)) == f"<{cls.__name__} unopened>"


def test_a_writer_stalled_on_the_ring_names_the_readers_behind() -> None:
    from verifiedring import MessageQueue, RingTimeoutError

    pid, host = os.getpid(), socket.gethostname()
    with MessageQueue(3, 3, [1, 2, 3], max_chunk_bytes=256, max_chunks=1) as w:
        readers = [MessageQueue.create_from_handle(w.export_handle(), r) for r in (1, 2, 3)]
        try:
            for q in (w, *readers):
                q.wait_until_ready(10)
            w.enqueue("a", timeout=10)
            assert readers[0].dequeue(10) == "a"
            with pytest.raises(RingTimeoutError) as info:
                w.enqueue("b", timeout=0.05)
        finally:
            for r in readers:
                r.close()
    names = f"reader rank 2 (pid {pid} on host {host}), reader rank 3 (pid {pid} on host {host})"
    alive = (f"reader rank 2 (pid {pid} on host {host}), its process is alive; "
             f"reader rank 3 (pid {pid} on host {host}), its process is alive")
    text = str(info.value)
    head = (f"writer (pid {pid}) could not enqueue message seq 1: local reader ranks [2, 3] "
            f"have not read the chunk it needs ({names}); ring: writer (pid {pid}) of ring ")
    assert text.startswith(head)
    tail = (" on chunk 0: saw written=1, read flags=[1, 0, 0], expected written=0 or every "
            f"read flag 1; readers [1, 2] ({alive}) have not read it, published ")
    assert tail in text and 0.0 <= float(text.rsplit(tail, 1)[1].removesuffix(" s ago")) < 10


def test_a_handshake_timeout_counts_the_readers_missing() -> None:
    from verifiedring import MessageQueue, RingTimeoutError

    with MessageQueue(3, 1, [1], max_chunk_bytes=256, max_chunks=1,
                      connect_ip="127.0.0.1") as w:
        r = MessageQueue.create_from_handle(w.export_handle(), 2)
        try:
            with pytest.raises(RingTimeoutError) as info:
                w.wait_until_ready(0.3)
        finally:
            r.close()
    assert str(info.value).startswith(
        f"writer (pid {os.getpid()}) waits for readers to subscribe: local ranks [1] "
        "missing; 1 of 2 remote readers missing (seen [2]); timed out after "
    )


def test_whole_milliseconds_round_up_and_never_go_below_zero() -> None:
    # 1e-10 s is float noise below a millisecond's millionth; 1e-7 s is a real wait
    assert [to_ms(s) for s in (0, 0.0, 1e-10, 1e-7, 4e-4, 0.001, 0.0015, 0.007, -1)] == [
        0, 0, 0, 1, 1, 1, 2, 7, 0
    ]


def test_a_cancelled_wait_says_what_cancelled_it(group: Callable[..., Group]) -> None:
    import threading

    from verifiedring import CancelledError

    g = group(1, 1)
    pid = os.getpid()
    cancel = threading.Event()
    cancel.set()
    for r, who in zip(g.readers, ("local reader rank 1", "remote reader rank 2"), strict=True):
        with pytest.raises(CancelledError) as info:
            r.dequeue(10, cancel=cancel)
        assert str(info.value) == (
            f"{who} (pid {pid}): the wait was cancelled: its cancel event was set"
        )
    g.readers[0].shutdown()
    with pytest.raises(CancelledError) as info:
        g.readers[0].dequeue(10)
    assert str(info.value) == (
        f"local reader rank 1 (pid {pid}): the wait was cancelled: shutdown() was called"
    )


def test_a_reader_asked_to_write_names_the_call(group: Callable[..., Group]) -> None:
    g = group(1)
    with pytest.raises(MisuseError) as info:
        g.readers[0].acquire_write(1)
    assert str(info.value) == (
        f"local reader rank 1 (pid {os.getpid()}): acquire_write() is not a call of a reader"
    )


def test_a_deadline_counts_down_to_zero_and_none_has_no_end() -> None:
    from verifiedring.waiting import Deadline

    assert Deadline.after(None).remaining() is None
    left = Deadline.after(5).remaining()
    assert left is not None and 4.0 < left <= 5.0
    assert Deadline.after(0).remaining() == 0.0
    now = time.monotonic()
    assert Deadline(now - 3.0, now - 4.0).remaining() == 0.0  # ended: never negative
