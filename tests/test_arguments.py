"""Arguments at the edge of their types and ranges: each is refused with a
:class:`MisuseError` naming the argument and the value, or accepted and honoured;
never a raw ``OverflowError``/``TypeError``, never a slot taken by a reader that
cannot exist. After every refusal a queue can still be built and used."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import pytest

from verifiedring import MessageQueue, MisuseError
from verifiedring.queue import reader as reader_module
from verifiedring.queue.remote_reader import RemoteReader
from verifiedring.waiting import Deadline

T = 10.0
LOOPBACK = "127.0.0.1"


def _refused(call: Any, *names: str) -> str:
    with pytest.raises(MisuseError) as info:
        call()
    message = str(info.value)
    for name in names:
        assert name in message, message
    return message


def _works(w: MessageQueue, readers: list[MessageQueue]) -> None:
    w.wait_until_ready(T)
    for r in readers:
        r.wait_until_ready(T)
    w.enqueue({"n": 1}, timeout=T)
    assert [r.dequeue(T) for r in readers] == [{"n": 1}] * len(readers)


@pytest.mark.parametrize("rank", [-1, 3, 2**32, True, "0", 1.5, None], ids=repr)
def test_a_local_reader_rank_outside_the_readers_is_refused(rank: Any) -> None:
    """Reader ranks are ints in 0..n_reader (the writer's own group rank is among them
    in create_from_process_group, so n_reader + 1 ranks in all)."""
    _refused(lambda: MessageQueue(2, 1, [rank]), "local_reader_ranks", repr(rank))
    with MessageQueue(2, 1, [2]) as w:  # the highest rank there is
        assert w.export_handle().local_reader_ranks == [2]


def test_a_remote_rank_outside_the_readers_is_refused_and_takes_no_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with MessageQueue(2, 0, connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        _refused(lambda: MessageQueue.create_from_handle(h, 7), "rank 7", "n_reader=2")
        _refused(lambda: RemoteReader(h, 7), "rank 7", "n_reader=2")  # the role's own too
        # one built past that check (a reader of another version): the writer ignores
        # its hello
        with monkeypatch.context() as m:
            m.setattr(reader_module, "check_attach", lambda *args: None)
            stray = RemoteReader(h, 7, None)
        try:
            readers = [MessageQueue.create_from_handle(h, k) for k in (1, 2)]
            try:
                _works(w, readers)
            finally:
                for r in readers:
                    r.close()
        finally:
            stray.close()


@pytest.mark.parametrize("linger", [-1, -0.5, "5", math.nan, math.inf, True, None], ids=repr)
def test_a_linger_that_is_no_number_of_seconds_is_refused(linger: Any) -> None:
    _refused(lambda: MessageQueue(1, 0, connect_ip=LOOPBACK, linger=linger), "linger",
             repr(linger))


@pytest.mark.parametrize("linger", [0, 0.25, 2, np.float64(1.5)], ids=repr)
def test_a_linger_in_seconds_is_accepted(linger: Any) -> None:
    with MessageQueue(1, 0, connect_ip=LOOPBACK, linger=linger) as w:
        assert w.export_handle().n_reader == 1


@pytest.mark.parametrize("window", [10**10, 2**31, 0, -1, 1.5, True], ids=repr)
def test_a_remote_window_zeromq_cannot_hold_is_refused(window: Any) -> None:
    _refused(lambda: MessageQueue(1, 0, connect_ip=LOOPBACK, remote_window=window),
             "remote_window", repr(window))


@pytest.mark.parametrize("max_chunks", [10**6, 2**17], ids=repr)
def test_more_chunks_than_a_ring_indexes_cheaply_are_refused(max_chunks: int) -> None:
    """Small chunks, so the room in /dev/shm is not what refuses them."""
    _refused(lambda: MessageQueue(1, 1, max_chunk_bytes=64, max_chunks=max_chunks),
             "max_chunks", repr(max_chunks))
    with MessageQueue(1, 1, max_chunk_bytes=64, max_chunks=2**16) as w:
        ring = w.export_handle().buffer_handle
        assert ring is not None and ring.max_chunks == 2**16


@pytest.mark.parametrize(
    "timeout", [np.float32(0.01), np.float64(0.01), np.int64(0), np.int32(0)], ids=repr
)
def test_numpy_numbers_are_timeouts_like_any_other(timeout: Any) -> None:
    d = Deadline.after(timeout)
    assert d.at is not None and d.at - d.started == pytest.approx(float(timeout), abs=1e-6)
    with MessageQueue(1, 1) as w:
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
        try:
            _works(w, [r])
            with pytest.raises(TimeoutError):
                r.dequeue(timeout)
        finally:
            r.close()


@pytest.mark.parametrize("timeout", [10**400, 2**1024], ids=["10**400", "2**1024"])
def test_a_timeout_beyond_any_clock_waits_without_a_deadline(timeout: Any) -> None:
    assert Deadline.after(timeout).at is None
    with MessageQueue(1, 1) as w:
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
        try:
            w.wait_until_ready(timeout)
            r.wait_until_ready(timeout)
            got: list[Any] = []
            t = threading.Thread(target=lambda: got.append(r.dequeue(timeout)))
            t.start()
            w.enqueue("late", timeout=timeout)
            t.join(T)
            assert got == ["late"]
        finally:
            r.close()


@pytest.mark.parametrize("heartbeat", [0, 0.05, -1, "10", math.nan, math.inf], ids=repr)
def test_a_heartbeat_timeout_below_a_tenth_of_a_second_or_no_number_is_refused(
    heartbeat: Any,
) -> None:
    _refused(lambda: MessageQueue(1, 0, connect_ip=LOOPBACK, heartbeat_timeout=heartbeat),
             "heartbeat_timeout", repr(heartbeat))


def test_the_heartbeat_timeout_travels_to_the_readers_in_the_handle() -> None:
    with MessageQueue(1, 0, connect_ip=LOOPBACK, heartbeat_timeout=2.5) as w:
        curve = w.export_handle().curve
        assert curve is not None and curve.heartbeat_timeout_ms == 2500
    with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
        curve = w.export_handle().curve
        assert curve is not None and curve.heartbeat_timeout_ms == 10_000


BAD_FIELDS: list[tuple[str, Any]] = [
    ("local_reader_ranks", "0"), ("local_reader_ranks", [0, "1"]),
    ("buffer_handle", ("ring", 1)), ("local_subscribe_addr", 5),
    ("remote_subscribe_addr", b"tcp://127.0.0.1:1"), ("remote_ack_addr", 7),
    ("remote_window", "8"), ("remote_window", 0), ("hmac_key", "key"), ("ring_tag", 3),
    ("curve", b"keys"), ("writer_pid", "1"), ("writer_pid", -1), ("writer_host", None),
    ("tensor_arena_handle", "arena"), ("remote_addr_ipv6", "no"), ("local_notify_addr", 1),
]


@pytest.mark.parametrize("field,value", BAD_FIELDS, ids=[f"{f}={v!r}" for f, v in BAD_FIELDS])
def test_a_handle_field_of_the_wrong_type_is_refused_naming_it(field: str, value: Any) -> None:
    import dataclasses

    with MessageQueue(2, 1, [0], connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        bad = dataclasses.replace(h, **{field: value})
        secret = field in ("hmac_key", "ring_tag", "curve")  # named by type, never shown
        shown = f"a value of type {type(value).__name__} (not shown" if secret else repr(value)
        for rank in (0, 1):  # the local and the remote reader
            message = _refused(lambda rank=rank: MessageQueue.create_from_handle(bad, rank),
                               f"handle.{field}", shown)
            assert not secret or repr(value) not in message, message
        readers = [MessageQueue.create_from_handle(h, rank) for rank in (0, 1)]
        try:
            _works(w, readers)
        finally:
            for r in readers:
                r.close()


def test_the_writers_options_are_checked_in_vllms_order_before_the_remote_ones() -> None:
    """With several options wrong, the writer names the first in its order: the large-
    object mode, the reader counts and the address before the remote channel's
    window, linger and heartbeat."""
    with pytest.raises(MisuseError, match=r"large_objects='rings'"):
        MessageQueue(1, 0, connect_ip=LOOPBACK, remote_window=-1, large_objects="rings")
    with pytest.raises(MisuseError, match=r"n_local_reader"):
        MessageQueue(1, 2, connect_ip=LOOPBACK, linger=-1.0)
    with pytest.raises(MisuseError, match=r"remote_window"):
        MessageQueue(1, 0, connect_ip=LOOPBACK, remote_window=-1, max_chunk_bytes=-5)
