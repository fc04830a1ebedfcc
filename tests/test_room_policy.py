"""The room policy in this process's /dev/shm: what a create reserves under each
policy, how a policy is named, what a reader may touch, what a full-/dev/shm
error advises. The policy under a full /dev/shm, racing creators included, is
``tests/faults/test_room.py``'s (a private small tmpfs)."""

from __future__ import annotations

import fcntl
import logging
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from verifiedring import (
    MessageQueue,
    MisuseError,
    RingLayout,
    SharedMemoryFullError,
    ShmRingBuffer,
    shm,
)
from verifiedring.arena import ArenaWriter
from verifiedring.queue import LocalReader, QueueWriter
from verifiedring.reservation import PAGE, RESERVE_ENV, committed_at_create, room_at_create

T = 10.0
MIB = 1 << 20


@pytest.mark.parametrize("reserve", ["some", "", "ALL", 1, b"all"], ids=repr)
def test_a_room_policy_that_is_not_pages_or_all_is_refused_naming_it(reserve: Any) -> None:
    with pytest.raises(MisuseError) as info:
        ShmRingBuffer(1, 4096, 2, reserve=reserve)
    assert str(info.value) == f"reserve={reserve!r}: the room policy is one of pages, all"


def test_a_room_policy_from_the_environment_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(RESERVE_ENV, "lazy")
    for make in (lambda: ShmRingBuffer(1, 4096, 2), lambda: MessageQueue(1, 1)):
        with pytest.raises(MisuseError) as info:
            make()
        assert str(info.value) == (
            f"{RESERVE_ENV}='lazy': the room policy is one of pages, all"
        )


def test_pages_reserves_the_metadata_and_first_pages_and_all_the_whole_segment() -> None:
    lay = RingLayout(2, 4 * MIB, 4)
    pages = sum(n for _, n in committed_at_create(lay, "pages"))
    assert 4 * PAGE < pages <= 6 * PAGE  # the sleep words, 4 first pages, the flags
    assert room_at_create(lay, "pages") == pages + 4 * MIB
    assert committed_at_create(lay, "all") == [(0, lay.total_bytes)]
    assert room_at_create(lay, "all") == lay.total_bytes
    with ShmRingBuffer(2, 4 * MIB, 4) as ring:
        assert ring.held_bytes() == -(-pages // PAGE) * PAGE  # whole pages
    with ShmRingBuffer(2, 4 * MIB, 4, reserve="all") as ring:
        assert ring.held_bytes() >= lay.total_bytes


def test_under_reserve_all_a_write_reserves_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RESERVE_ENV, "all")
    w = QueueWriter(1, 1, max_chunk_bytes=MIB, max_chunks=2)
    r = LocalReader(w.export_handle(), 0)
    try:
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        assert w._local is not None
        ring = w._local.ring
        held = ring.held_bytes()
        with mock.patch("verifiedring.shm.os.posix_fallocate") as fallocate:
            for i in range(4):
                w.enqueue(bytes([i]) * (MIB - 100), timeout=T)
                assert r.dequeue(T) == bytes([i]) * (MIB - 100)
        assert fallocate.call_count == 0
        assert ring.held_bytes() == held
    finally:
        r.close()
        w.close()


@pytest.fixture
def big_chunks() -> Iterator[tuple[QueueWriter, LocalReader]]:
    w = QueueWriter(1, 1, max_chunk_bytes=4 * MIB, max_chunks=2)
    r = LocalReader(w.export_handle(), 0)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    yield w, r
    r.close()
    w.close()


def test_acquire_read_lends_the_stored_bytes_and_no_unreserved_page(
    big_chunks: tuple[QueueWriter, LocalReader],
) -> None:
    """A small message in a 4 MiB chunk: the reader is lent its encoding, not the rest
    of the chunk, whose pages the writer never reserved; reading it reserves none."""
    w, r = big_chunks
    assert w._local is not None
    ring = w._local.ring
    obj = {"small": list(range(10))}
    w.enqueue(obj, timeout=T)
    held = ring.held_bytes()
    with r.acquire_read(timeout=T) as buf:
        assert bytes(buf) == pickle.dumps(obj, protocol=5)
        assert len(bytes(buf)) == buf.nbytes  # every byte lent, read
    assert ring.held_bytes() == held


def test_acquire_read_of_an_acquire_write_body_lends_the_whole_payload(
    big_chunks: tuple[QueueWriter, LocalReader],
) -> None:
    w, r = big_chunks
    with w.acquire_write(timeout=T) as buf:
        buf[:3] = b"raw"
        buf[-3:] = b"end"
        size = len(buf)
    with r.acquire_read(timeout=T) as got:
        assert len(got) == size and bytes(got[:3]) == b"raw" and bytes(got[-3:]) == b"end"


def test_the_tensor_arenas_full_shm_error_advises_shrinking_the_arena() -> None:
    with (
        mock.patch("verifiedring.shm.free_bytes", return_value=4096),
        pytest.raises(SharedMemoryFullError) as info,
    ):
        ArenaWriter(1, lambda: 0, n_slots=2, slot_bytes=MIB)
    message = str(info.value)
    assert message.startswith("Insufficient space in /dev/shm for the tensor arena's segment: ")
    assert message.endswith(
        "4096 bytes free: shrink the tensor arena (arena_slots * arena_slot_bytes), or build "
        "the queue without it (enable_shm_tensor_arena=False) or enlarge /dev/shm (e.g. "
        "--shm-size or --ipc=host)"
    ), message
    assert "max_chunk_bytes" not in message, message


def test_a_turn_whose_exit_an_interrupt_cut_does_not_hold_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A signal landing as a reservation's turn exits (its ``with`` exit cut: the
    generator is left at its ``yield``, kept by the traceback) left /dev/shm's create
    lock held by this process: its next create or reservation waited ``TURN_WAIT``
    (10 s) and went on without the lock, warned. Now the next turn closes the cut one's
    descriptor first, and the cut one, finished later, closes nothing of the next's."""
    monkeypatch.setattr(shm, "TURN_WAIT", 0.2)
    cut = shm._turn(str(tmp_path))
    cut.__enter__()  # its exit never runs, as when an interrupt cuts it
    with caplog.at_level(logging.WARNING, logger="verifiedring"), shm._turn(str(tmp_path)):
        probe = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:  # the lock is this turn's: another descriptor cannot take it
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            del cut  # the cut turn's generator is finished now: it must not unlock
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    assert [r.getMessage() for r in caplog.records] == []
