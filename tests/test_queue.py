"""MessageQueue: API, channels, ordering, lifecycle and misuse (exact delivery)."""

from __future__ import annotations

import dataclasses
import gc
import os
import pickle
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from support.fakes import segment_exists
from support.groups import LOOPBACK, Group, T
from support.signals import on_python_steps

from verifiedring import (
    BrokenPeerError,
    BusyError,
    ClosedError,
    Handle,
    MessageQueue,
    MisuseError,
    RingTimeoutError,
    ShmRingBuffer,
)
from verifiedring import cursors as cursors_module
from verifiedring.queue import wire
from verifiedring.queue.flavors import control
from verifiedring.ring import WriterCursor
from verifiedring.testing import wait_blocked
from verifiedring.testing.faults import hold_local_frames, wedge_local_socket
from verifiedring.testing.launcher import Supervisor, Task, raise_for
from verifiedring.waiting import futex_wait


def sample_objects(n: int, seed: int = 0) -> list[Any]:
    """Mixed inline and overflow objects for a 4 KiB chunk."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for i in range(n):
        k = i % 6
        if k == 0:
            out.append({"i": i, "s": "x" * int(rng.integers(0, 200))})
        elif k == 1:
            out.append(bytes(rng.integers(0, 256, int(rng.integers(5000, 100_000)), np.uint8)))
        elif k == 2:
            out.append(rng.standard_normal(int(rng.integers(1, 40_000))))
        elif k == 3:
            out.append(bytearray(b"%d" % i) * int(rng.integers(1, 3000)))
        elif k == 4:
            out.append((i, [rng.standard_normal(10), b"small"], None))
        else:
            out.append(("tail", i))
    return out


def same(a: Any, b: Any) -> bool:
    return pickle.dumps(a, protocol=5) == pickle.dumps(b, protocol=5)


# --- across processes ------------------------------------------------------------


def _reader_proc(handle: Handle, rank: int, n: int) -> tuple[list[bytes], str]:
    """Every object (pickled, to compare exactly), then what ended the stream."""
    with MessageQueue.create_from_handle(handle, rank) as q:
        q.wait_until_ready(T * 3)
        got = [q.dequeue(T * 3) for _ in range(n)]
        try:
            q.dequeue(T * 3)
            tail = "no ClosedError"
        except ClosedError:
            tail = "closed"
        return [pickle.dumps(o, protocol=5) for o in got], tail


def test_processes_local_and_remote_exact_delivery_then_shutdown() -> None:
    objs = sample_objects(120)
    ranks = (3, 1, 0)  # ranks 0..n_reader, not in order, remote rank 0
    with MessageQueue(3, 2, [3, 1], max_chunk_bytes=4096, max_chunks=3, connect_ip=LOOPBACK) as w:
        handle = w.export_handle()
        tasks = [Task(_reader_proc, (handle, r, len(objs)), name=f"rank {r}") for r in ranks]
        with Supervisor(tasks) as run:
            w.wait_until_ready(T * 6)
            for o in objs:
                w.enqueue(o, timeout=T * 3)
            w.close()  # shutdown: readers get ClosedError after the last object
            results = dict(zip(ranks, raise_for(run.wait(T * 6), "readers"), strict=True))
    expected = [pickle.dumps(o, protocol=5) for o in objs]
    for rank in ranks:
        got, tail = results[rank]
        assert got == expected, f"rank {rank}: content/order/count differ"
        assert tail == "closed"


# --- one process ------------------------------------------------------------------


def test_inline_overflow_ordering_local_and_remote(group: Callable[..., Group]) -> None:
    g = group(2, 1)
    objs = sample_objects(60, seed=1)
    got: list[list[Any]] = [[] for _ in g.readers]
    for o in objs:  # interleave so a 4-chunk ring never fills
        g.writer.enqueue(o, timeout=T)
        for i, r in enumerate(g.readers):
            got[i].append(r.dequeue(T))
    for per_reader in got:
        assert len(per_reader) == len(objs)
        assert all(same(a, b) for a, b in zip(per_reader, objs, strict=True))


def test_numpy_arrives_writable_and_equal(group: Callable[..., Group]) -> None:
    g = group(1, 1)
    big = np.arange(100_000, dtype=np.float32)  # overflow, out of band
    small = np.arange(10, dtype=np.int16)  # inline
    for a in (big, small):
        g.writer.enqueue(a, timeout=T)
        for r in g.readers:
            b = r.dequeue(T)
            assert b.dtype == a.dtype and np.array_equal(a, b)
            assert b.flags.writeable
            b[0] = 7  # must not touch the sender's array
    assert big[0] == 0


def test_mutating_a_buffer_after_enqueue_does_not_change_what_readers_get(
    group: Callable[..., Group],
) -> None:
    g = group(1, 1)
    a = np.zeros(200_000, dtype=np.uint8)
    g.writer.enqueue(a, timeout=T)
    a[:] = 1
    for r in g.readers:
        assert not r.dequeue(T).any()


def test_broadcast_object_and_context_manager(group: Callable[..., Group]) -> None:
    g = group(1, 0)
    assert g.writer.broadcast_object({"x": 1}) == {"x": 1}
    assert g.readers[0].broadcast_object() == {"x": 1}
    assert g.writer.is_writer and g.readers[0].is_local_reader


def test_timeout_zero_polls_once(group: Callable[..., Group]) -> None:
    g = group(1, 1)
    for r in g.readers:
        with pytest.raises(RingTimeoutError, match="seq 0"):
            r.dequeue(timeout=0)
    g.writer.enqueue("a", timeout=0)
    assert g.readers[0].dequeue(timeout=0) == "a"  # inline: in the ring already
    assert g.readers[1].dequeue(timeout=T) == "a"


def test_timeout_while_overflow_frame_pending_retry_returns_same_object(
    group: Callable[..., Group],
) -> None:
    g = group(1, 0, max_chunks=2)
    w, r = g.writer, g.readers[0]
    held = hold_local_frames(w)
    big = b"B" * 50_000
    w.enqueue(big, timeout=T)
    w.enqueue("after", timeout=T)
    with pytest.raises(RingTimeoutError, match="overflow frame seq 0"):
        r.dequeue(timeout=0.05)
    # The chunk was released: the writer can refill both chunks meanwhile.
    w.enqueue("third", timeout=T)
    with pytest.raises(RingTimeoutError, match="overflow frame seq 0"):
        r.dequeue(timeout=0)
    held.release()
    held.restore()
    assert r.dequeue(T) == big
    assert r.dequeue(T) == "after"
    assert r.dequeue(T) == "third"


def test_remote_reader_lagging_by_thousands_loses_nothing(group: Callable[..., Group]) -> None:
    g = group(0, 1, remote_window=256)
    w, r = g.writer, g.readers[0]
    n = 5000
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            for i in range(n):
                w.enqueue((i, b"p" * (i % 64)), timeout=T * 3)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=produce)
    t.start()
    wait_blocked(t, T)  # the reader lags: the writer runs into the window and waits
    got = [r.dequeue(T * 3) for _ in range(n)]
    t.join(T * 3)
    assert not errors
    assert got == [(i, b"p" * (i % 64)) for i in range(n)]


def test_remote_window_timeout_names_slow_reader(group: Callable[..., Group]) -> None:
    g = group(0, 2, remote_window=8)
    w = g.writer
    for i in range(8):
        w.enqueue(i, timeout=T)
    for _ in range(8):
        g.readers[0].dequeue(T)  # rank 1 keeps up, rank 2 does not
    with pytest.raises(RingTimeoutError, match=r"remote readers \{2: 0\}"):
        w.enqueue(8, timeout=0.2)
    assert [g.readers[1].dequeue(T) for _ in range(8)] == list(range(8))
    w.enqueue(8, timeout=T)  # usable again
    assert [r.dequeue(T) for r in g.readers] == [8, 8]


def test_ring_stall_names_unread_local_ranks(group: Callable[..., Group]) -> None:
    g = group(2, 0, local_ranks=[2, 0], max_chunks=2)
    w, r2, r0 = g.writer, *g.readers
    w.enqueue(0, timeout=T)
    w.enqueue(1, timeout=T)
    assert r2.dequeue(T) == 0
    with pytest.raises(RingTimeoutError, match=r"local reader ranks \[0\]"):
        w.enqueue(2, timeout=0.05)
    assert r0.dequeue(T) == 0
    w.enqueue(2, timeout=T)
    assert [r2.dequeue(T), r2.dequeue(T), r0.dequeue(T), r0.dequeue(T)] == [1, 2, 1, 2]


@pytest.mark.parametrize("n_local,n_remote", [(1, 0), (0, 1)])
def test_shutdown_unblocks_blocked_readers(
    group: Callable[..., Group], n_local: int, n_remote: int
) -> None:
    g = group(n_local, n_remote)
    r = g.readers[0]
    g.writer.enqueue("last", timeout=T)
    outcome: list[Any] = [r.dequeue()]  # "last"

    def blocked() -> None:
        try:
            r.dequeue()  # no timeout: only shutdown can end this
        except ClosedError as exc:
            outcome.append(exc)

    t = threading.Thread(target=blocked)
    t.start()
    wait_blocked(t, T)  # inside its wait for a next message
    g.writer.close()
    t.join(T)
    assert not t.is_alive()
    assert outcome[0] == "last" and isinstance(outcome[1], ClosedError)
    with pytest.raises(ClosedError):
        r.dequeue(timeout=0)


def _dequeue_until_closed(r: Any) -> tuple[threading.Thread, list[BaseException]]:
    """A thread in ``r.dequeue()`` with no timeout, and where its ClosedError lands."""
    outcome: list[BaseException] = []

    def blocked() -> None:
        try:
            r.dequeue()
        except ClosedError as exc:
            outcome.append(exc)

    t = threading.Thread(target=blocked)
    t.start()
    return t, outcome


def test_shutdown_wakes_a_reader_in_a_long_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local reader idle long enough that its block is seconds long (0.1, 0.2, ... 3.2)
    is told of SHUTDOWN (the writer's close) at once: the writer wakes it after sending
    the frame, and the early wake makes the next block short. Before, it slept out its
    3.2 s block."""
    g = Group(1, 0)
    r = g.local[0]
    r._cursor.max_idle_block = 30.0
    blocks: list[float] = []
    began = threading.Event()

    def counting(address: int, expected: int, timeout: float) -> None:
        blocks.append(timeout)
        if len(blocks) == 6:  # the 3.2 s block
            began.set()
        futex_wait(address, expected, timeout)

    monkeypatch.setattr(cursors_module, "futex_wait", counting)
    t, outcome = _dequeue_until_closed(r)
    assert began.wait(T), blocks
    wait_blocked(t, T)
    g.writer.close()
    t.join(1.5)  # well inside the 3.2 s block the reader is in
    assert not t.is_alive(), f"still asleep; its blocks: {blocks}"
    assert len(outcome) == 1 and isinstance(outcome[0], ClosedError)
    assert blocks[:6] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2]
    r.close()


def _reader_blocked_for_30_s(g: Group, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``g``'s reader, each block of its waits up to 30 s and its timed socket look
    every 30 s, with no writer watch (so that only what the writer does can end its
    block, and only a look the protocol makes can see its frame)."""
    monkeypatch.setattr(control, "SLICE", 30.0)
    r = g.local[0]
    r._cursor.max_block = r._cursor.max_idle_block = 30.0
    path = r._path
    assert path._writer_watch is not None
    path._writer_watch.close()
    path._writer_watch = None
    return r


def test_a_reader_woken_by_shutdown_looks_at_its_socket_before_it_blocks_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The writer's close sends SHUTDOWN, stores the ring's ended word, then wakes the
    reader (wake_all) moments after the reader's last look at its socket. The woken
    reader's re-check sees the ended word and waits on its socket for the frame however
    recent its last look and however long ZeroMQ takes to deliver it (ReaderWake.tla):
    ClosedError now. Before, its timed look was not due yet, or the frame was still in
    ZeroMQ's IO threads, and it blocked again for its whole first block (here 30 s)."""
    g = Group(1, 0)
    r = _reader_blocked_for_30_s(g, monkeypatch)
    t, outcome = _dequeue_until_closed(r)
    wait_blocked(t, T)  # in its first block, right after its first look
    g.writer.close()
    t.join(5.0)  # a sixth of its block
    assert not t.is_alive(), "blocked again after the wake: SHUTDOWN not looked at"
    assert len(outcome) == 1 and isinstance(outcome[0], ClosedError)
    r.close()


def test_a_reader_sees_the_writers_last_frame_however_late_it_lands_after_the_wake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SHUTDOWN lands on the reader's socket only after wake_all has woken the reader
    and its wait has settled again (held back here: ZeroMQ's IO threads may take that
    long). The ring's ended word keeps the woken reader off its sleep word: it waits on
    its socket, and raises ClosedError once the frame lands, with no other wake. Before,
    it blocked again on its sleep word for its whole block (here 30 s)."""
    g = Group(1, 0)
    r = _reader_blocked_for_30_s(g, monkeypatch)
    held = hold_local_frames(g.writer)
    t, outcome = _dequeue_until_closed(r)
    wait_blocked(t, T)
    g.writer._path.cuts.tell_readers(0.0)  # SHUTDOWN (held back), the ended word, wake_all
    assert [wire.read_header(parts[0])[0] for parts in held.held] == [wire.SHUTDOWN]
    wait_blocked(t, T)  # waiting again after the wake, with the frame still held
    held.release()
    held.restore()
    t.join(5.0)  # a sixth of its block
    assert not t.is_alive(), "blocked on its sleep word after the wake: SHUTDOWN unseen"
    assert len(outcome) == 1 and isinstance(outcome[0], ClosedError)
    g.writer.close()
    r.close()


def test_close_idempotent_and_only_creator_unlinks() -> None:
    g = Group(1, 0)
    name = g.handle.buffer_handle.name  # type: ignore[union-attr]
    ipc_dir = os.path.dirname(g.handle.local_subscribe_addr[len("ipc://") :])  # type: ignore[index]
    # the handshake is complete: every reader attached, so both names are gone already
    assert not segment_exists(name)
    assert not os.path.exists(ipc_dir)
    roundtrip(g)
    g.readers[0].close()
    g.readers[0].close()
    g.writer.close()
    g.writer.close()
    with pytest.raises(ClosedError):
        g.writer.enqueue(1)
    with pytest.raises(ClosedError):
        g.readers[0].dequeue(0)


def test_a_dropped_queue_cleans_up_silently(recwarn: pytest.WarningsRecorder) -> None:
    """vLLM and SGLang release a queue with ``mq = None``: that is close(), silently."""
    q = MessageQueue(1, 1)
    h = q.export_handle()
    name = h.buffer_handle.name  # type: ignore[union-attr]
    ipc_dir = os.path.dirname(h.local_subscribe_addr[len("ipc://") :])  # type: ignore[index]
    assert segment_exists(name) and os.path.isdir(ipc_dir)  # before the handshake
    q = None  # type: ignore[assignment]
    gc.collect()
    assert not segment_exists(name)
    assert not os.path.exists(ipc_dir)
    assert recwarn.list == []


# --- misuse: a clear error, and the queue stays usable ------------------------------


def roundtrip(g: Group, obj: Any = "ok") -> None:
    g.writer.enqueue(obj, timeout=T)
    for r in g.readers:
        assert same(r.dequeue(T), obj)


def test_role_misuse(group: Callable[..., Group]) -> None:
    g = group(1, 1)
    with pytest.raises(MisuseError, match="dequeue"):
        g.writer.dequeue(0)
    for r in g.readers:
        with pytest.raises(MisuseError, match="enqueue"):
            r.enqueue(1)
        assert r.export_handle() == g.handle  # vLLM: a reader hands its handle on
    roundtrip(g)


@pytest.mark.parametrize(
    "bad",
    [lambda: 1, threading.Lock(), (1, [2, {"k": threading.Lock()}])],
    ids=["lambda", "lock", "nested-lock"],
)
def test_unpicklable_fails_before_claiming_a_chunk(group: Callable[..., Group], bad: Any) -> None:
    g = group(1, 1, max_chunks=2)
    with pytest.raises(MisuseError, match=type(bad).__qualname__):
        g.writer.enqueue(bad, timeout=0)
    roundtrip(g, [1, 2])
    roundtrip(g, b"o" * 20_000)
    roundtrip(g)  # a 2-chunk ring cycled: no chunk was leaked


def test_enqueue_before_ready_is_misuse() -> None:
    with MessageQueue(1, 1) as w, pytest.raises(MisuseError, match="wait_until_ready"):
        w.enqueue(1)


def test_bad_construction_arguments() -> None:
    with pytest.raises(MisuseError, match="n_local_reader"):
        MessageQueue(1, 2)
    with pytest.raises(MisuseError, match="distinct"):
        MessageQueue(2, 2, [1, 1])
    with pytest.raises(MisuseError, match="every interface"):
        MessageQueue(2, 1, connect_ip="0.0.0.0")
    with pytest.raises(MisuseError, match=r"max_chunk_bytes=21 cannot hold a message"):
        MessageQueue(1, 1, max_chunk_bytes=21)  # the header alone is 21 bytes
    with MessageQueue(1, 1, max_chunk_bytes=22) as q:
        h = q.export_handle()
        for rank in (-2, 2**32 - 1, 2**32, True, "1"):
            with pytest.raises(MisuseError, match=r"rank must be an int in 0\.\.4294967294, or -1"):
                MessageQueue.create_from_handle(h, rank)  # type: ignore[arg-type]
        for bad in (-1, float("nan"), "soon"):
            with pytest.raises(MisuseError, match="timeout must be") as info:
                q.wait_until_ready(bad)  # type: ignore[arg-type]
            assert repr(bad) in str(info.value)


def test_negative_timeout_is_misuse(group: Callable[..., Group]) -> None:
    g = group(1, 0)
    with pytest.raises(MisuseError, match="timeout"):
        g.readers[0].dequeue(-1)
    with pytest.raises(MisuseError, match="timeout"):
        g.writer.enqueue(1, timeout=-1)
    roundtrip(g)


def test_wrong_handles(group: Callable[..., Group]) -> None:
    g = group(1, 0)
    h = g.handle
    with pytest.raises(MisuseError, match="not in local_reader_ranks"):
        MessageQueue.create_from_handle(h, 0)  # a rank of the group, but not local
    bh = h.buffer_handle
    assert bh is not None
    bad_geometry = dataclasses.replace(h, buffer_handle=dataclasses.replace(bh, max_chunks=2))
    with pytest.raises(BrokenPeerError, match="geometry"):
        MessageQueue.create_from_handle(bad_geometry, 1)
    with pytest.raises(MisuseError, match="Handle"):
        MessageQueue.create_from_handle(object(), 1)  # type: ignore[arg-type]
    roundtrip(g)
    g.writer.close()
    with pytest.raises(BrokenPeerError, match="does not exist"):
        MessageQueue.create_from_handle(h, 1)


def test_wait_until_ready_times_out_naming_missing_readers() -> None:
    with MessageQueue(3, 2, [1, 2], connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        missing = r"local ranks \[2\] missing.*1 of 1 remote"
        with MessageQueue.create_from_handle(h, 1), pytest.raises(RingTimeoutError, match=missing):
            w.wait_until_ready(timeout=0.3)


def test_a_send_that_times_out_is_a_broken_peer_naming_the_frame(
    group: Callable[..., Group],
) -> None:
    g = group(1, 0, max_chunks=2)
    w = g.writer
    with wedge_local_socket(w), pytest.raises(
        BrokenPeerError, match="overflow frame seq 0 could not be queued"
    ):
        w.enqueue(b"B" * 50_000, timeout=T)


def test_large_inline_buffers_are_owned_by_the_reader(group: Callable[..., Group]) -> None:
    """Top-level bytes/bytearray (lent views) and numpy (copied buffers) stored inline
    come out exact, of the same type, and unchanged after the writer reuses the chunk."""
    g = group(1, 0, max_chunk_bytes=1 << 20, max_chunks=1)
    w, r = g.writer, g.readers[0]
    sent: list[Any] = [
        bytes(range(256)) * 1024,
        bytearray(b"\x07" * 300_000),
        np.arange(70_000, dtype=np.int64),
    ]
    got = []
    for obj in sent:
        w.enqueue(obj, timeout=T)
        got.append(r.dequeue(timeout=T))
    w.enqueue(b"\xff" * 600_000, timeout=T)  # overwrites the only chunk
    assert r.dequeue(timeout=T) == b"\xff" * 600_000
    for s, g_ in zip(sent, got, strict=True):
        assert type(g_) is type(s)
        if isinstance(s, np.ndarray):
            assert np.array_equal(g_, s)
        else:
            assert g_ == s


def test_wait_until_ready_retried_after_a_timeout_keeps_the_readers_it_saw() -> None:
    """A retry of the writer's handshake counts the readers that subscribed during the
    first, timed-out try (before Peers, it forgot them and could never succeed)."""
    with MessageQueue(2, 2, [0, 1]) as w:
        h = w.export_handle()
        with MessageQueue.create_from_handle(h, 0) as r0:
            with pytest.raises(RingTimeoutError, match=r"local ranks \[1\] missing"):
                w.wait_until_ready(timeout=0.5)  # r0's hello arrives during this try
            with MessageQueue.create_from_handle(h, 1) as r1:
                w.wait_until_ready(T)
                r0.wait_until_ready(T)
                r1.wait_until_ready(T)
                w.enqueue("ready")
                assert [r0.dequeue(T), r1.dequeue(T)] == ["ready", "ready"]


def _until_busy(call: Callable[[], Any], bound: float = T) -> BusyError:
    """``call`` (a non-blocking queue call) repeated until another thread is inside the
    same end: it then raises BusyError. Before that it times out, touching nothing."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        try:
            call()
        except BusyError as exc:
            return exc
        except RingTimeoutError:
            time.sleep(0.001)  # the other thread is not inside yet
            continue
        raise AssertionError("the call succeeded while another thread should be inside")
    raise AssertionError(f"no BusyError within {bound} s")


def _retrying(call: Callable[[], Any]) -> Any:
    """``call`` in a thread that may itself meet the main thread's probe: retried."""
    while True:
        try:
            return call()
        except BusyError:
            continue


def test_two_threads_in_one_reader_raise_busy_and_leave_it_intact(
    group: Callable[..., Group],
) -> None:
    g = group(1, 0)
    r = g.readers[0]
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(_retrying(lambda: r.dequeue(timeout=T))))
    t.start()
    exc = _until_busy(lambda: r.dequeue(timeout=0))
    assert isinstance(exc, MisuseError) and "another thread is inside" in str(exc)
    assert f"local reader rank {r.rank}" in str(exc)
    g.writer.enqueue("first", timeout=T)
    t.join(T)
    assert not t.is_alive() and got == ["first"]
    g.writer.enqueue("second", timeout=T)
    assert r.dequeue(timeout=T) == "second"  # nothing lost, nothing read twice


def test_two_threads_in_one_writer_raise_busy_and_leave_it_intact(
    group: Callable[..., Group],
) -> None:
    g = group(1, 0, max_chunks=2)
    w, r = g.writer, g.readers[0]
    w.enqueue(0, timeout=T)
    w.enqueue(1, timeout=T)  # the ring is full: the next enqueue waits for room
    t = threading.Thread(target=lambda: _retrying(lambda: w.enqueue(2, timeout=T)))
    t.start()
    exc = _until_busy(lambda: w.enqueue("never", timeout=0))
    assert "writer (pid" in str(exc) and "enqueue()" in str(exc)
    got = [r.dequeue(timeout=T) for _ in range(3)]
    t.join(T)
    assert not t.is_alive() and got == [0, 1, 2]
    w.enqueue(3, timeout=T)
    assert r.dequeue(timeout=T) == 3


def test_repr_names_type_role_rank_seq_and_state() -> None:
    g = Group(1, 0, [1])
    w, r = g.writer, g.readers[0]
    roundtrip(g, "one")
    assert re.fullmatch(r"<QueueWriter writer \(pid \d+\) seq 1 chunk>", repr(w)), repr(w)
    assert re.fullmatch(
        r"<LocalReader local reader rank 1 \(pid \d+\) seq 1 idle>", repr(r)
    ), repr(r)
    ring = ShmRingBuffer(2, 1024, 3)
    cursor = ring.writer()
    assert re.fullmatch(
        rf"<ShmRingBuffer '{ring.name}' 2 readers x 3 chunks of 1024 bytes, writer>", repr(ring)
    ), repr(ring)
    assert repr(cursor) == f"<WriterCursor writer of ring {ring.name!r} chunk 0 idle>"
    ring.close()
    assert repr(cursor).endswith("chunk 0 closed>") and repr(ring).endswith(", writer closed>")
    g.close()
    assert repr(w).endswith(" seq 1 closed>") and repr(r).endswith(" seq 1 closed>")


def test_an_interrupt_right_after_a_marker_is_published_breaks_the_writer(
    group: Callable[..., Group], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The marker is out, its frame not sent: the writer refuses from then on (a retry
    with the same seq would hand the reader the next object in this one's place)."""
    g = group(1, 0)

    def interrupted(seq: int, p: Any) -> list[Any]:
        raise KeyboardInterrupt

    monkeypatch.setattr(wire, "frame_parts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        g.writer.enqueue(b"o" * 10_000, timeout=T)  # overflow: marker, then its frame
    monkeypatch.undo()
    with pytest.raises(BrokenPeerError, match="message seq 0 was interrupted"):
        g.writer.enqueue("next", timeout=T)


def test_an_interrupt_as_a_chunk_is_published_leaves_it_unpublished_and_the_writer_usable(
    group: Callable[..., Group], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """KeyboardInterrupt delivered at publish()'s first line (before any flag store):
    the chunk is let go unpublished, so the next enqueue reuses it and its seq."""
    g = group(1, 0)
    on_python_steps(g.writer)
    publish = WriterCursor.publish

    def interrupted(self: WriterCursor) -> None:
        monkeypatch.setattr(WriterCursor, "publish", publish)
        raise KeyboardInterrupt

    monkeypatch.setattr(WriterCursor, "publish", interrupted)
    with pytest.raises(KeyboardInterrupt):
        g.writer.enqueue("lost", timeout=T)
    g.writer.enqueue("next", timeout=T)
    assert g.readers[0].dequeue(timeout=T) == "next"
    with pytest.raises(RingTimeoutError):
        g.readers[0].dequeue(timeout=0)


def test_a_reader_waiting_for_ready_names_the_writer_once() -> None:
    with MessageQueue(2, 1, [0], connect_ip=LOOPBACK) as w:  # rank 1 never attaches
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
        try:
            with pytest.raises(TimeoutError) as info:
                r.wait_until_ready(0.05)
            message = str(info.value)
            assert "waiting for READY from the writer (pid " in message, message
            assert message.count("the writer") == 1, message
        finally:
            r.close()
