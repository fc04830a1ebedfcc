"""Each call vLLM 0.33 / SGLang 0.5 make, made exactly as their sources make it."""

from __future__ import annotations

import gc
import os
import pickle
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import pytest
from support.fakes import segment_exists

from verifiedring import CancelledError, MisuseError, RingTimeoutError
from verifiedring.compat import vllm as shim
from verifiedring.compat.vllm import MessageQueue, ShmRingBuffer
from verifiedring.distributed.group import create_from_process_group
from verifiedring.queue.wire import HEADER_BYTES
from verifiedring.testing import wait_blocked

T = 10.0
LOOPBACK = "127.0.0.1"


def test_executor_startup_positional_counts_and_arena_flag() -> None:
    # multiproc_executor: MessageQueue(world_size, local_world_size, max_chunk_bytes=...,
    # connect_ip=..., enable_shm_tensor_arena=...)
    mq = MessageQueue(2, 1, max_chunk_bytes=1 << 20, connect_ip=LOOPBACK,
                      enable_shm_tensor_arena=False)
    try:
        h = mq.export_handle()
        readers = [MessageQueue.create_from_handle(h, 0), MessageQueue.create_from_handle(h, 1)]
        mq.wait_until_ready(T)
        for r in readers:
            r.wait_until_ready(T)
        mq.enqueue(("execute_model", {"step": 1}))
        assert [r.dequeue(T) for r in readers] == [("execute_model", {"step": 1})] * 2
        for r in readers:
            r.close()
    finally:
        mq.close()


def test_remote_readers_without_connect_ip_use_this_hosts_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VLLM_HOST_IP", LOOPBACK)
    with MessageQueue(2, 1) as mq:
        addr = mq.export_handle().remote_subscribe_addr
        assert addr is not None and addr.startswith(f"tcp://{LOOPBACK}:")


def _pair(n_remote: int = 0) -> tuple[MessageQueue, MessageQueue]:
    w = MessageQueue(1, 1 - n_remote, connect_ip=LOOPBACK if n_remote else None)
    r = MessageQueue.create_from_handle(w.export_handle(), -1 if n_remote else 0)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    return w, r


def _blocked(call: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, raised


def test_death_monitor_shutdown_wakes_a_busy_loop_reader() -> None:
    """The worker's busy loop blocks in dequeue(indefinite=True); the death monitor
    thread calls shutdown() on that (local) reader: the dequeue raises at once, a
    RuntimeError saying "cancelled". As vLLM's, a message published after still comes
    out; a dequeue that would wait is cancelled."""
    w, r = _pair()
    try:
        t, raised = _blocked(lambda: r.dequeue(indefinite=True))
        wait_blocked(t, T)  # really blocked
        r.shutdown()  # from this (another) thread
        t.join(T)
        assert not t.is_alive()
        assert len(raised) == 1 and isinstance(raised[0], CancelledError)
        assert isinstance(raised[0], RuntimeError) and "cancelled" in str(raised[0])
        assert r.shutting_down
        w.enqueue("published after the shutdown")
        assert r.dequeue(timeout=T) == "published after the shutdown"
        with pytest.raises(CancelledError, match="cancelled: shutdown"):
            r.dequeue(timeout=0)
    finally:
        r.close()
        w.close()


def test_a_remote_readers_shutdown_wakes_nothing() -> None:
    """vLLM's remote reader: shutdown() sets shutting_down only; the blocked dequeue
    goes on and returns the next message, later ones time out as before."""
    w, r = _pair(n_remote=1)
    try:
        got: list[Any] = []
        t, raised = _blocked(lambda: got.append(r.dequeue(timeout=T)))
        wait_blocked(t, T)
        r.shutdown()
        wait_blocked(t, T)  # still blocked in its wait (it raises if the thread ended)
        assert r.shutting_down and raised == []
        w.enqueue("still delivered")
        t.join(T)
        assert (got, raised) == (["still delivered"], [])
        with pytest.raises(RingTimeoutError):
            r.dequeue(timeout=0)
    finally:
        r.close()
        w.close()


def test_dequeue_with_a_cancel_event() -> None:
    w, r = _pair()
    try:
        cancel = threading.Event()
        t, raised = _blocked(lambda: r.dequeue(timeout=T, cancel=cancel))
        t.join(0.3)
        cancel.set()
        t.join(T)
        assert len(raised) == 1 and isinstance(raised[0], CancelledError)
        w.enqueue("after")  # a cancel ends that call only
        assert r.dequeue(timeout=T, cancel=threading.Event()) == "after"
    finally:
        r.close()
        w.close()


def test_response_queue_and_a_rankless_remote_reader() -> None:
    w, r = _pair(n_remote=1)  # multi-node response queue: create_from_handle(h, -1)
    try:
        for i in range(5):
            w.enqueue({"i": i, "blob": b"x" * 100_000})
        assert [r.dequeue(T)["i"] for _ in range(5)] == list(range(5))
        assert "without a rank" in r._who()
    finally:
        r.close()
        w.close()


def test_mq_none_releases_everything() -> None:
    mq = MessageQueue(1, 1)
    h = mq.export_handle()
    name = h.buffer_handle.name  # type: ignore[union-attr]
    ipc_dir = os.path.dirname(h.local_subscribe_addr[len("ipc://"):])  # type: ignore[index]
    mq = None  # type: ignore[assignment]  # as both engines do
    gc.collect()
    assert not segment_exists(name) and not os.path.exists(ipc_dir)


class StatelessGroup:
    """vLLM's StatelessProcessGroup surface (rank, world_size, broadcast_obj,
    all_gather_obj), for ranks that are threads of this process."""

    def __init__(self, rank: int, world: int, shared: dict[str, Any],
                 barrier: threading.Barrier) -> None:
        self.rank, self.world_size = rank, world
        self._shared, self._barrier = shared, barrier
        self._n = 0

    def _round(self) -> str:
        self._n += 1
        return f"round{self._n}"

    def broadcast_obj(self, obj: Any, src: int) -> Any:
        key = self._round()
        if self.rank == src:
            self._shared[key] = obj
        self._barrier.wait(T)
        return self._shared[key]

    def all_gather_obj(self, obj: Any) -> list[Any]:
        key = self._round()
        self._shared[f"{key}/{self.rank}"] = obj
        self._barrier.wait(T)
        return [self._shared[f"{key}/{r}"] for r in range(self.world_size)]


def test_create_from_a_stateless_process_group() -> None:
    world, barrier = 3, threading.Barrier(3)
    shared: dict[str, Any] = {}
    queues: dict[int, MessageQueue] = {}
    errors: list[BaseException] = []

    def rank_main(rank: int) -> None:
        try:
            pg = StatelessGroup(rank, world, shared, barrier)
            queues[rank] = create_from_process_group(
                MessageQueue, pg, 1 << 16, 4, writer_rank=1, blocking=True, timeout=T
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(T * 2)
    try:
        assert errors == []
        assert queues[1].is_writer and queues[0].is_local_reader and queues[2].is_local_reader
        queues[1].broadcast_object({"method": "load_model"})
        assert [queues[r].broadcast_object() for r in (0, 2)] == [{"method": "load_model"}] * 2
    finally:
        for q in queues.values():
            q.close()


def test_ring_buffer_attaches_by_name_and_unpacks_its_handle() -> None:
    with ShmRingBuffer(2, 64, 3) as ring:
        handle = ring.handle()
        assert tuple(handle) == (2, 64, 3, ring.name)
        with ShmRingBuffer(*handle) as attached:  # vLLM: ShmRingBuffer(*handle)
            assert not attached.is_creator and attached.name == ring.name


def test_warning_interval_from_the_engines_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_RINGBUFFER_WARNING_INTERVAL", "2.5")
    with MessageQueue(1, 1) as mq:
        assert mq.log_interval == 2.5
    monkeypatch.delenv("VLLM_RINGBUFFER_WARNING_INTERVAL")
    monkeypatch.setenv("SGLANG_RINGBUFFER_WARNING_INTERVAL", "7")
    with MessageQueue(1, 1) as mq:
        assert mq.log_interval == 7.0


def test_check_shm_free_space_raises_runtime_error() -> None:
    free = os.statvfs("/dev/shm")
    too_much = free.f_bavail * free.f_frsize + (1 << 30)
    with pytest.raises(RuntimeError, match=r"Insufficient space in /dev/shm for ring: "):
        shim.check_shm_free_space(too_much, allocation_name="ring")
    shim.check_shm_free_space(1)


def test_install_points_the_vllm_module_path_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """No vLLM here: a fake module tree stands in for the engine's imports."""
    for name in ("vllm", "vllm.distributed", "vllm.distributed.device_communicators"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.delitem(sys.modules, shim.VLLM_MODULE, raising=False)
    try:
        _install_and_import(monkeypatch)
    finally:
        shim.uninstall()


def _install_and_import(monkeypatch: pytest.MonkeyPatch) -> None:
    shim.install()
    from vllm.distributed.device_communicators.shm_broadcast import (
        Handle,
        memory_fence,
    )
    from vllm.distributed.device_communicators.shm_broadcast import (
        MessageQueue as EngineMQ,
    )
    from vllm.distributed.device_communicators.shm_broadcast import (
        ShmRingBuffer as EngineRing,
    )

    assert EngineMQ is MessageQueue and EngineRing is ShmRingBuffer
    assert Handle is shim.Handle
    memory_fence()
    # an engine that had imported the real module already gets its names replaced
    stale = types.ModuleType(shim.VLLM_MODULE)
    monkeypatch.setitem(sys.modules, shim.VLLM_MODULE, stale)
    shim.install()
    assert stale.MessageQueue is MessageQueue


def test_acquire_write_and_acquire_read_on_the_queue() -> None:
    """vLLM's buffer API on the queue: the bytes written into the buffer reach every
    reader, local and remote, in order with the objects around them, each once."""
    w = MessageQueue(2, 1, [0], max_chunk_bytes=1024, max_chunks=4, connect_ip="127.0.0.1")
    h = w.export_handle()
    readers = [MessageQueue.create_from_handle(h, r) for r in (0, 1)]
    try:
        for q in (w, *readers):
            q.wait_until_ready(10)
        w.enqueue("before", timeout=10)
        with w.acquire_write(timeout=10) as buf:
            assert buf.nbytes == 1024 - HEADER_BYTES and not buf.readonly
            buf[:5] = b"hello"
        with pytest.raises(ValueError, match="caller"), w.acquire_write(timeout=10) as buf:
            buf[:3] = b"bad"
            raise ValueError("the caller gave up")  # nothing is sent
        w.enqueue("after", timeout=10)
        for r in readers:
            assert r.dequeue(timeout=10) == "before"
            with r.acquire_read(timeout=10, indefinite=True) as got:
                assert got.readonly and bytes(got[:6]) == b"hello\0"
                assert got.nbytes == 1024 - HEADER_BYTES
            assert r.dequeue(timeout=10) == "after"
            with pytest.raises(RingTimeoutError):
                r.dequeue(timeout=0.05)
        w.enqueue({"not": "bytes"}, timeout=10)
        with readers[0].acquire_read(timeout=10) as got:  # a local reader: any chunk, raw
            assert got.readonly and pickle.loads(got) == {"not": "bytes"}
        with pytest.raises(MisuseError, match="type dict"), readers[1].acquire_read(timeout=10):
            pass  # a remote reader has no chunk: bytes only
        with pytest.raises(MisuseError, match="acquire_write"), readers[0].acquire_write():
            pass
    finally:
        for q in (*readers, w):
            q.close()
