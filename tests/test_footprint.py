"""The ring's /dev/shm footprint: pages are reserved as the writer's bytes reach them.

vLLM's executor ring (24 MiB x 10) and a worker's response queue hold about one
page per chunk while they carry small messages; a message of almost a chunk
reserves that chunk once; a reservation without room is a SharedMemoryFullError
before any store, and the queue stays usable; readers never reserve.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest

from verifiedring import MessageQueue, RingTimeoutError, ShmRingBuffer
from verifiedring.errors import SharedMemoryFullError
from verifiedring.queue import LocalReader, QueueWriter
from verifiedring.reservation import PAGE
from verifiedring.waiting import Deadline

T = 10.0
MIB = 1 << 20
KIB_MESSAGE = b"k" * 1024
#: Almost a chunk of 1 MiB: INLINE_LENT, 68 bytes of header, length and stream besides.
BIG = b"b" * (MIB - 100)
BIG_CHUNK_BYTES = MIB - 32


@pytest.fixture
def queues() -> Iterator[Callable[..., tuple[QueueWriter, list[LocalReader]]]]:
    made: list[MessageQueue] = []

    def make(n_local: int, *args: Any, **kw: Any) -> tuple[QueueWriter, list[LocalReader]]:
        w = QueueWriter(n_local, n_local, *args, **kw)
        h = w.export_handle()
        readers = [LocalReader(h, r) for r in range(n_local)]
        made.extend([w, *readers])
        w.wait_until_ready(T)
        for r in readers:
            r.wait_until_ready(T)
        return w, readers

    yield make
    for q in reversed(made):
        q.close()


def ring_of(w: QueueWriter) -> ShmRingBuffer:
    assert w._local is not None
    return w._local.ring


def test_default_geometry_is_vllms() -> None:
    w = MessageQueue(1, 0)
    try:
        assert isinstance(w, QueueWriter)
        assert (w.max_chunk_bytes, w.max_chunks) == (24 * MIB, 10)
    finally:
        w.close()


def test_executor_ring_and_worker_queue_hold_one_page_per_chunk(
    queues: Callable[..., tuple[QueueWriter, list[LocalReader]]],
) -> None:
    """vLLM's executor-shaped ring (2 local readers, 24 MiB x 10) and a worker's
    ``MessageQueue(1, 1)``: after 1,000 1 KiB messages each holds exactly one page per
    chunk (the first also holds the sleep words) plus one page of flags -- 44 KiB, not
    the 240 MiB of a segment committed whole."""
    executor, readers = queues(2, max_chunk_bytes=24 * MIB, max_chunks=10)
    worker, [response] = queues(1)
    pages_per_ring = 10 + 1
    held_at_start = [ring_of(q).held_bytes() for q in (executor, worker)]
    assert held_at_start == [pages_per_ring * PAGE] * 2
    for i in range(1000):
        executor.enqueue((i, KIB_MESSAGE), T)
        assert [r.dequeue(T) for r in readers] == [(i, KIB_MESSAGE)] * 2
        worker.enqueue((i, KIB_MESSAGE), T)
        assert response.dequeue(T) == (i, KIB_MESSAGE)
    assert [ring_of(q).held_bytes() for q in (executor, worker)] == [pages_per_ring * PAGE] * 2


def test_a_message_of_almost_a_chunk_reserves_the_whole_chunk_once(
    queues: Callable[..., tuple[QueueWriter, list[LocalReader]]],
) -> None:
    w, [r] = queues(1, max_chunk_bytes=MIB, max_chunks=2)
    ring = ring_of(w)
    with mock.patch.object(os, "posix_fallocate", wraps=os.posix_fallocate) as spy:
        for obj in (BIG, b"small", BIG, b"small"):  # chunks 0, 1, 0, 1
            w.enqueue(obj, T)
            assert r.dequeue(T) == obj
    # chunk 0 starts at byte 64 of page 0: its first 4032 bytes were backed at create;
    # the one call backs the rest of it, to the end of the page it ends in
    assert [c.args[1:] for c in spy.call_args_list] == [(PAGE, MIB)]
    # chunk 0 whole (page 0 .. the page shared with chunk 1's start), the flag page
    assert ring.held_bytes() == MIB + 2 * PAGE


def test_a_growing_message_stream_reserves_in_doubling_steps() -> None:
    ring = ShmRingBuffer(1, MIB, 1)
    try:
        w = ring.writer()
        reserve = mock.patch.object(os, "posix_fallocate", wraps=os.posix_fallocate)
        with reserve as spy:
            marks = []
            for n in (100, 5000, 6000, 9000, 100_000, 200_000, MIB):
                w.claim(deadline_now(), None, n)
                marks.append(w._marks[0])
        assert marks == [4032, 8128, 8128, 16320, 102336, 204736, MIB]
        assert [c.args[1:] for c in spy.call_args_list] == [
            (4096, 4096), (8192, 8192), (16384, 86016), (102400, 102400),
            (204800, MIB + 66 - 204800),  # to the segment's end: its flags, 2 bytes
        ]
    finally:
        ring.close()


def deadline_now() -> Deadline:
    return Deadline.after(0)


def test_a_raw_chunk_write_reserves_the_whole_chunk_first() -> None:
    """``with acquire_write() as buf`` may store anywhere in ``buf``: all of it is
    backed before the body runs."""
    ring = ShmRingBuffer(1, MIB, 2)
    try:
        w = ring.writer()
        with w.acquire_write(T) as buf:
            buf[len(buf) - 1] = 7
        assert ring.held_bytes() == MIB + 2 * PAGE
    finally:
        ring.close()


def _no_room(fd: int, offset: int, length: int) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_no_room_for_a_reservation_raises_before_any_store_and_the_queue_stays_usable(
    queues: Callable[..., tuple[QueueWriter, list[LocalReader]]],
) -> None:
    w, [r] = queues(1, max_chunk_bytes=MIB, max_chunks=2)
    ring = ring_of(w)
    assert w._local is not None
    cursor = w._local.cursor
    w.enqueue("first", T)  # chunk 0
    assert r.dequeue(T) == "first"
    buf = ring._segment.buf
    flags = bytes(buf[ring.layout.flags_base :])
    chunk1 = bytes(buf[ring.layout.data_offset(1) : ring.layout.data_offset(1) + 4000])
    held = ring.held_bytes()
    with mock.patch.object(os, "posix_fallocate", side_effect=_no_room) as failing:
        with pytest.raises(SharedMemoryFullError) as info:
            w.enqueue(BIG, T)
        assert isinstance(info.value, RuntimeError)
        [call] = failing.call_args_list
        # chunk 1, from its second page to the segment's end (its flags: 2 x 2 bytes)
        assert call.args[1:] == (MIB + PAGE, MIB + 68 - PAGE)
    message = str(info.value)
    assert f"segment {ring.name!r}: no room in /dev/shm for chunk 1" in message
    assert f"a write of {BIG_CHUNK_BYTES} bytes from its start" in message
    assert f"{MIB + 68 - PAGE} more bytes wanted" in message and "bytes free" in message
    # nothing stored, nothing held: the flags and the chunk are as they were
    assert bytes(buf[ring.layout.flags_base :]) == flags
    assert bytes(buf[ring.layout.data_offset(1) : ring.layout.data_offset(1) + 4000]) == chunk1
    assert (cursor.index, cursor.holding, ring.held_bytes()) == (1, False, held)
    with pytest.raises(RingTimeoutError):
        r.dequeue(0)  # the message was not sent
    for obj in ("second", BIG, "third"):  # the same queue, with room again
        w.enqueue(obj, T)
        assert r.dequeue(T) == obj


def test_readers_never_reserve(
    queues: Callable[..., tuple[QueueWriter, list[LocalReader]]],
) -> None:
    w, [r] = queues(1, max_chunk_bytes=MIB, max_chunks=2)
    writer_fd = ring_of(w)._segment._fd
    with mock.patch.object(os, "posix_fallocate", wraps=os.posix_fallocate) as spy:
        for obj in (BIG, "b", b"c" * (MIB // 2), BIG):
            w.enqueue(obj, T)
            assert r.dequeue(T) == obj
    assert [c.args[0] for c in spy.call_args_list] == [writer_fd, writer_fd]


def test_a_full_shm_names_the_arena_when_the_arena_does_not_fit() -> None:
    """The arena's segment is made after the ring's: its room error names it."""
    from verifiedring.arena import ArenaWriter  # noqa: F401 -- the arena's module is loaded

    real = os.posix_fallocate
    made: list[int] = []

    def second_fails(fd: int, offset: int, length: int) -> None:
        made.append(fd)
        if len(set(made)) > 1:  # the ring's segment is the first one made
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, offset, length)

    with mock.patch("os.posix_fallocate", second_fails), pytest.raises(
        SharedMemoryFullError, match="the tensor arena's segment"
    ):
        MessageQueue(1, 1, max_chunk_bytes=1 << 16, enable_shm_tensor_arena=True,
                     arena_slots=1, arena_slot_bytes=1 << 20)
    with MessageQueue(1, 1, max_chunk_bytes=1 << 16) as w:  # nothing left half-built
        assert w.export_handle().tensor_arena_handle is None


def test_no_inode_left_in_shm_is_a_clear_error() -> None:
    """shm_open fails with ENOSPC when the tmpfs has no inode left (its bytes may be
    free): a SharedMemoryFullError saying so, not a raw OSError."""
    import _posixshmem

    def no_inode(*args: Any, **kw: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with mock.patch.object(_posixshmem, "shm_open", no_inode), pytest.raises(
        SharedMemoryFullError, match="no inode"
    ):
        MessageQueue(1, 1, max_chunk_bytes=1 << 16)
