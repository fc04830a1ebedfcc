"""The vLLM-shaped surface of the compat layer: Handle, queue attributes, module
names tests patch, log records, the SGLang switch. Exact values and types."""

from __future__ import annotations

import dataclasses
import logging
import pickle
import shutil
import sys
import types
from collections.abc import Iterator
from unittest import mock

import pytest
import zmq
from support.engines import installed_over_fake_engines

from verifiedring import BrokenPeerError, MisuseError, RingTimeoutError, SharedMemoryFullError
from verifiedring.compat import vllm as shim
from verifiedring.compat.vllm import MessageQueue, ShmRingBuffer

T = 10.0
LOOPBACK = "127.0.0.1"


def test_handle_has_vllms_shape_and_defaults() -> None:
    empty = shim.Handle()
    assert empty.local_reader_ranks == [] and isinstance(empty.local_reader_ranks, list)
    assert (empty.buffer_handle, empty.local_subscribe_addr, empty.local_notify_addr,
            empty.remote_subscribe_addr, empty.tensor_arena_handle) == (None,) * 5
    assert empty.remote_addr_ipv6 is False
    with pytest.raises(MisuseError, match="no reader"):
        MessageQueue.create_from_handle(empty, 0)


def test_exported_handle_lists_ranks_and_replace_keeps_the_tamper_check() -> None:
    with MessageQueue(3, 2, [2, 0], max_chunk_bytes=256, max_chunks=2,
                      connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        assert h.local_reader_ranks == [2, 0] and type(h.local_reader_ranks) is list
        assert h.remote_addr_ipv6 is False and h.local_notify_addr is None
        assert pickle.loads(pickle.dumps(h)) == h
        same = dataclasses.replace(h, local_reader_ranks=[2, 0])
        assert same == h
        assert h.buffer_handle is not None
        grown = dataclasses.replace(h.buffer_handle, max_chunks=3)
        with pytest.raises(BrokenPeerError, match="altered"):
            MessageQueue.create_from_handle(dataclasses.replace(h, buffer_handle=grown), 0)


def test_an_ipv6_writer_says_so_in_its_handle() -> None:
    try:
        w = MessageQueue(1, 0, connect_ip="::1")
    except Exception as exc:  # no IPv6 loopback on this host
        pytest.skip(f"no IPv6 loopback: {exc}")
    with w:
        h = w.export_handle()
        assert h.remote_addr_ipv6 is True
        assert (h.remote_subscribe_addr or "").startswith("tcp://[::1]:")
        r = MessageQueue.create_from_handle(h, -1)
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        w.enqueue("over v6")
        assert r.dequeue(T) == "over v6"
        r.close()


# --- the queue's attributes, as vLLM reads them --------------------------------------


def _ends() -> tuple[MessageQueue, MessageQueue, MessageQueue]:
    w = MessageQueue(2, 1, [2], max_chunk_bytes=512, max_chunks=3, connect_ip=LOOPBACK)
    h = w.export_handle()
    local, remote = MessageQueue.create_from_handle(h, 2), MessageQueue.create_from_handle(h, 0)
    for q in (w, local, remote):
        q.wait_until_ready(T)
    return w, local, remote


def test_roles_counts_ranks_and_handles() -> None:
    w, local, remote = _ends()
    try:
        assert [(q._is_writer, q._is_local_reader, q._is_remote_reader)
                for q in (w, local, remote)] == [(True, False, False), (False, True, False),
                                                 (False, False, True)]
        assert [(q.n_local_reader, q.n_remote_reader) for q in (w, local, remote)] == [(1, 1)] * 3
        assert [q.local_reader_rank for q in (w, local, remote)] == [-1, 0, -1]  # rank 2: flag 0
        h = w.export_handle()
        assert w.handle == h and local.handle is remote.handle
        assert local.handle.local_reader_ranks == [2]
        assert [q.tensor_arena for q in (w, local, remote)] == [None] * 3
        assert [q.shutting_down for q in (w, local, remote)] == [False] * 3
    finally:
        for q in (remote, local, w):
            q.close()


def test_sockets_are_the_ends_zmq_sockets() -> None:
    w, local, remote = _ends()
    try:
        kinds = [(None if q.local_socket is None else q.local_socket.type,
                  None if q.remote_socket is None else q.remote_socket.type)
                 for q in (w, local, remote)]
        assert kinds == [(zmq.XPUB, zmq.XPUB), (zmq.SUB, None), (None, zmq.SUB)]
    finally:
        for q in (remote, local, w):
            q.close()


def test_buffer_views_and_current_idx_follow_the_ring() -> None:
    w, local, remote = _ends()
    try:
        assert isinstance(w.buffer, ShmRingBuffer) and remote.buffer is None
        ring = local.buffer
        assert (ring.n_reader, ring.max_chunk_bytes, ring.max_chunks, ring.metadata_size) == (
            1, 512, 3, 2)
        assert (w.current_idx, local.current_idx, remote.current_idx) == (0, 0, -1)
        w.enqueue("m0", timeout=T)
        assert w.current_idx == 1
        with ring.get_metadata(0) as meta:
            assert bytes(meta) == b"\x01\x00"  # written, unread
        with ring.get_data(0) as data:
            assert data.nbytes == 512 and not data.readonly
        assert local.dequeue(T) == "m0" and remote.dequeue(T) == "m0"
        assert local.current_idx == 1
        with ring.get_metadata(0) as meta:
            assert bytes(meta) == b"\x01\x01"  # and read: flag 1 + local_reader_rank
        with pytest.raises(MisuseError):
            ring.get_data(3).__enter__()
    finally:
        for q in (remote, local, w):
            q.close()


def test_a_writer_without_local_readers_has_no_ring() -> None:
    with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
        assert (w.buffer, w.current_idx, w.local_socket) == (None, -1, None)
        assert w.remote_socket is not None and w.n_remote_reader == 1


def test_static_recv_unpickles_parts_as_out_of_band_buffers() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    try:
        pull.bind("inproc://compat-recv")
        push.connect("inproc://compat-recv")
        with pytest.raises(TimeoutError):
            MessageQueue.recv(pull, 0)
        with pytest.raises(RingTimeoutError):
            MessageQueue.recv(pull, -1.0)  # below 0: no wait, as vLLM's
        big = bytearray(b"x" * 4096)
        oob: list[pickle.PickleBuffer] = []
        body = pickle.dumps(pickle.PickleBuffer(big), protocol=5, buffer_callback=oob.append)
        push.send_multipart([body, *[b.raw() for b in oob]])
        got = MessageQueue.recv(pull, T)
        assert bytes(got) == bytes(big) and len(oob) == 1
    finally:
        push.close(linger=0)
        pull.close(linger=0)


# --- install(): module names read at call time, log records, SGLang --------------------


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    yield from installed_over_fake_engines(monkeypatch)


def test_both_engines_module_paths_resolve_here(installed: types.ModuleType) -> None:
    assert sys.modules[shim.VLLM_MODULE] is installed is sys.modules[shim.SGLANG_MODULE]
    from sglang.srt.distributed.device_communicators import (  # type: ignore[import-not-found]
        shm_broadcast,
    )

    assert shm_broadcast.MessageQueue is MessageQueue and shm_broadcast.Handle is shim.Handle
    assert isinstance(shm_broadcast.SGLANG_RINGBUFFER_WARNING_INTERVAL, int)
    with pytest.raises(MisuseError, match="engines are"):
        shim.install("trt")


def test_an_engine_module_imported_before_install_is_replaced_then_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM imports its shm_broadcast while importing vllm.distributed: install() must
    make the path, the parent package's attribute and the names of the module already
    held all lead here (so a mock.patch by path reaches this module), and uninstall()
    must give every one of them back."""
    parent_name, _, leaf = shim.VLLM_MODULE.rpartition(".")
    parts = shim.VLLM_MODULE.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    parent = sys.modules[parent_name]
    theirs = types.ModuleType(shim.VLLM_MODULE)
    their_queue = type("MessageQueue", (), {})
    theirs.MessageQueue = their_queue  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, shim.VLLM_MODULE, theirs)
    monkeypatch.setattr(parent, leaf, theirs, raising=False)
    monkeypatch.delitem(sys.modules, shim.SGLANG_MODULE, raising=False)
    shim.install()
    try:
        assert sys.modules[shim.VLLM_MODULE] is shim and getattr(parent, leaf) is shim
        assert theirs.MessageQueue is MessageQueue  # code holding the old module
        with mock.patch(f"{shim.VLLM_MODULE}.VLLM_RINGBUFFER_WARNING_INTERVAL", 7):
            assert shim.VLLM_RINGBUFFER_WARNING_INTERVAL == 7
        assert shim.VLLM_RINGBUFFER_WARNING_INTERVAL != 7
    finally:
        shim.uninstall()
    assert sys.modules[shim.VLLM_MODULE] is theirs and getattr(parent, leaf) is theirs
    assert theirs.MessageQueue is their_queue
    assert not hasattr(theirs, "ShmRingBuffer")  # a name it never had is not left behind
    assert shim.SGLANG_MODULE not in sys.modules


def test_patched_warning_interval_reaches_queues_built_after(installed: types.ModuleType) -> None:
    with MessageQueue(1, 1) as mq:
        assert mq.log_interval == float(shim.VLLM_RINGBUFFER_WARNING_INTERVAL)
    with mock.patch(f"{shim.VLLM_MODULE}.VLLM_RINGBUFFER_WARNING_INTERVAL", 3):
        with MessageQueue(1, 1) as mq:
            assert mq.log_interval == 3.0
        with MessageQueue(1, 1) as w, MessageQueue.create_from_handle(
            w.export_handle(), 0
        ) as r:
            assert r.log_interval == 3.0
    with mock.patch(f"{shim.VLLM_MODULE}.VLLM_RINGBUFFER_WARNING_INTERVAL", 0), pytest.raises(
        MisuseError, match="VLLM_RINGBUFFER_WARNING_INTERVAL=0"
    ):
        MessageQueue(1, 1)
    shim.install("sglang")
    with mock.patch(f"{shim.SGLANG_MODULE}.SGLANG_RINGBUFFER_WARNING_INTERVAL", 7), MessageQueue(
        1, 1
    ) as mq:
        assert mq.log_interval == 7.0


def test_patched_disk_usage_refuses_the_segment(installed: types.ModuleType) -> None:
    usage = shutil.disk_usage("/dev/shm")._replace(free=4096)
    with mock.patch(f"{shim.VLLM_MODULE}.shutil.disk_usage", return_value=usage) as du:
        with pytest.raises(RuntimeError, match=r"Insufficient space in /dev/shm for "):
            MessageQueue(1, 1, max_chunk_bytes=1 << 20, max_chunks=2)
        with pytest.raises(SharedMemoryFullError):
            ShmRingBuffer(1, 1 << 20, 2)
        assert du.call_args_list[0] == mock.call("/dev/shm")
    with ShmRingBuffer(1, 1 << 20, 2):  # the real free space again
        pass


def test_patched_cgroup_check_sees_every_segment(installed: types.ModuleType) -> None:
    with mock.patch(f"{shim.VLLM_MODULE}.check_cgroup_memory_available") as check:
        with ShmRingBuffer(2, 4096, 3) as ring:
            size = ring.layout.total_bytes
        assert check.call_args_list == [mock.call(size, "the ring's segment")]
        check.reset_mock()
        with MessageQueue(1, 1, max_chunk_bytes=4096, max_chunks=3):
            pass
        assert [c.args[1] for c in check.call_args_list] == ["the ring's segment"] * 2


def _stall(installed: types.ModuleType, interval_name: str) -> None:
    """A writer whose one reader never reads: its enqueue waits, logging stalls."""
    with mock.patch.object(installed, interval_name, 0.05):
        w = MessageQueue(1, 1, max_chunk_bytes=1024, max_chunks=1)
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        w.enqueue("fills the ring", timeout=T)
        with pytest.raises(RingTimeoutError):
            w.enqueue("waits", timeout=0.4)
    finally:
        r.close()
        w.close()


def test_stall_records_reach_vllms_logger_at_info(
    installed: types.ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _stall(installed, "VLLM_RINGBUFFER_WARNING_INTERVAL")
    stalls = [r for r in caplog.records if "still waiting" in r.getMessage()]
    assert stalls and {(r.name, r.levelno) for r in stalls} == {(shim.VLLM_MODULE, logging.INFO)}
    assert not [r for r in caplog.records if r.name == "verifiedring"]  # re-issued, once
    caplog.clear()
    # SGLang's silencing line for vLLM's logger
    logging.getLogger(shim.VLLM_MODULE).setLevel(logging.WARNING)
    try:
        _stall(installed, "VLLM_RINGBUFFER_WARNING_INTERVAL")
    finally:
        logging.getLogger(shim.VLLM_MODULE).setLevel(logging.NOTSET)
    assert not [r for r in caplog.records if "still waiting" in r.getMessage()]


def test_stall_records_reach_sglangs_logger_at_warning(
    installed: types.ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    shim.install("sglang")
    caplog.set_level(logging.DEBUG)
    _stall(installed, "SGLANG_RINGBUFFER_WARNING_INTERVAL")
    stalls = [r for r in caplog.records if "still waiting" in r.getMessage()]
    assert stalls and {(r.name, r.levelno) for r in stalls} == {
        (shim.SGLANG_MODULE, logging.WARNING)}


def test_uninstall_restores_the_librarys_own_logging(
    installed: types.ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    shim.uninstall()
    caplog.set_level(logging.DEBUG)
    logging.getLogger("verifiedring").warning("plain")
    assert [(r.name, r.levelno) for r in caplog.records] == [("verifiedring", logging.WARNING)]
    assert shim.VLLM_MODULE not in sys.modules


def test_the_handles_unpack_as_vllms_tuples_and_the_ring_has_vllms_layout_names() -> None:
    with MessageQueue(1, 1, max_chunk_bytes=4096, max_chunks=3) as w:
        h = w.export_handle()
        bh = h.buffer_handle
        assert isinstance(bh, tuple) and tuple(bh) == (1, 4096, 3, bh.name)
        assert pickle.loads(pickle.dumps(bh)) == bh
        assert dataclasses.replace(bh, max_chunks=4).max_chunks == 4
        ring = w.buffer
        lay = ring.layout
        assert (ring.total_bytes_of_buffer, ring.data_offset, ring.metadata_offset) == (
            lay.total_bytes, lay.data_offset(0), lay.flags_offset(0))
        assert ring.shared_memory.name == bh.name
        assert ring.shared_memory.size == lay.total_bytes == len(ring.shared_memory.buf)
