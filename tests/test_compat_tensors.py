"""vLLM's tensor names in the compat module: ``_reduce_tensor`` / ``_rebuild_tensor``,
the call-time reducer hook of ``enqueue``, and ``ShmTensorArena`` / ``_ArenaPickler``
/ ``_TENSOR_ARENAS`` over verifiedring's arena (:mod:`verifiedring.compat.tensor_arena`).
"""

from __future__ import annotations

import ctypes
import gc
import io
import pickle
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import torch

from verifiedring import MisuseError
from verifiedring.compat import vllm as shim
from verifiedring.compat.vllm import MessageQueue
from verifiedring.queue import serialization

T = 10.0
MIB = 1 << 20


def address(buf: Any) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buf))


def dumps(obj: Any, arena: Any = None) -> tuple[bytes, list[Any]]:
    """``obj`` pickled with the compat reducer in the dispatch table (behind an
    ``_ArenaPickler`` over ``arena`` if given); buffers of 1 MiB and more out of band
    (as vLLM's enqueue does)."""
    oob: list[Any] = []

    def keep(b: pickle.PickleBuffer) -> bool:
        raw = b.raw()
        if raw.nbytes < MIB:
            return True
        oob.append(raw)
        return False

    bio = io.BytesIO()
    pickler = (pickle.Pickler(bio, protocol=5, buffer_callback=keep) if arena is None
               else shim._ArenaPickler(bio, arena, buffer_callback=keep))
    pickler.dispatch_table = {torch.Tensor: shim._reduce_tensor}
    pickler.dump(obj)
    return bio.getvalue(), oob


# --- _reduce_tensor / _rebuild_tensor ------------------------------------------------


def test_the_compat_reducer_is_the_queues_one_rule() -> None:
    assert shim._reduce_tensor is serialization.reduce_tensor
    assert shim._rebuild_tensor is serialization.rebuild_tensor


def test_a_cpu_tensor_reduces_to_a_buffer_over_its_own_memory() -> None:
    t = torch.arange(1000, dtype=torch.float32).reshape(10, 100)
    fn, (buf, shape, dtype) = shim._reduce_tensor(t)
    assert (fn, shape, dtype) == (shim._rebuild_tensor, (10, 100), "float32")
    raw = buf.raw()
    assert (raw.nbytes, address(raw)) == (4000, t.data_ptr())


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.ones(8, requires_grad=True),
        lambda: torch.ones(4, dtype=torch.complex64).conj(),
        lambda: torch._neg_view(torch.ones(4)),  # negative bit
        lambda: torch.nn.Parameter(torch.ones(4), requires_grad=False),
    ],
    ids=["requires_grad", "conj", "neg", "parameter"],
)
def test_tensors_it_cannot_alias_take_torchs_reduction_and_round_trip(make: Any) -> None:
    t = make()
    reduced = shim._reduce_tensor(t)
    assert reduced[0] is not shim._rebuild_tensor
    assert reduced[0] is t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)[0]  # torch's own rebuild
    data, oob = dumps({"t": t})
    got = pickle.loads(data, buffers=oob)["t"]
    assert type(got) is type(t)
    assert (got.shape, got.dtype, got.requires_grad) == (t.shape, t.dtype, t.requires_grad)
    assert torch.equal(got.detach().resolve_conj().resolve_neg(),
                       t.detach().resolve_conj().resolve_neg())


@pytest.mark.parametrize("device", ["meta", "cuda"])
def test_a_tensor_on_another_device_takes_torchs_reduction(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    t = torch.ones(3, device=device)
    assert shim._reduce_tensor(t)[0] is t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)[0]


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(1 << 19, dtype=torch.float32).reshape(512, 1024),  # 2 MiB: oob
        lambda: torch.arange(600, dtype=torch.float32).to(torch.bfloat16),
        lambda: torch.arange(256, dtype=torch.float32).to(torch.float8_e5m2),
        lambda: torch.empty(3, 0, 2),
        lambda: torch.tensor(-2.5, dtype=torch.float64),
        lambda: torch.arange(4096, dtype=torch.int16).reshape(64, 64)[:, 1::3],
        lambda: torch.arange(12) % 5 == 0,
    ],
    ids=["oob", "bf16", "fp8", "empty", "scalar", "noncontig", "bool"],
)
def test_rebuilt_tensors_are_exact_and_writable(make: Any) -> None:
    t = make()
    data, oob = dumps([t, "tail"])
    got, tail = pickle.loads(data, buffers=[bytearray(b) for b in oob])
    assert tail == "tail"
    assert (type(got), got.shape, got.dtype, got.requires_grad) == (
        torch.Tensor, t.shape, t.dtype, False)
    assert raw_bytes(got) == raw_bytes(t)
    if got.numel():
        before = raw_bytes(t)
        got.reshape(-1).view(torch.uint8)[0] ^= 0xFF
        assert raw_bytes(t) == before  # no aliasing of the writer's tensor


def raw_bytes(t: torch.Tensor) -> list[int]:
    return t.contiguous().reshape(-1).view(torch.uint8).tolist()


def test_a_read_only_buffer_is_copied_so_the_tensor_is_writable() -> None:
    t = torch.arange(4, dtype=torch.int32)
    src = bytes(t.view(torch.uint8).numpy())
    got = shim._rebuild_tensor(src, (4,), "int32")
    got[0] = 9
    assert (got.tolist(), src) == ([9, 1, 2, 3], bytes(t.view(torch.uint8).numpy()))


# --- the call-time hook of enqueue ----------------------------------------------------


@pytest.fixture
def pair() -> Iterator[tuple[MessageQueue, MessageQueue]]:
    w = MessageQueue(1, 1, max_chunk_bytes=4 * MIB)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    yield w, r
    r.close()
    w.close()


def test_enqueue_looks_the_compat_reducer_up_at_each_call(
    pair: tuple[MessageQueue, MessageQueue],
) -> None:
    w, r = pair
    a, b, c = torch.ones(3), torch.zeros(2 * MIB, dtype=torch.uint8), torch.arange(2)
    shim.install()
    try:
        with mock.patch.object(shim, "_reduce_tensor", wraps=shim._reduce_tensor) as spy:
            w.enqueue({"a": a, "nest": [1, {"b": b}], "c": c}, timeout=T)
        assert [id(call.args[0]) for call in spy.call_args_list] == [id(a), id(b), id(c)]
        got = r.dequeue(T)
        assert [torch.equal(got["a"], a), torch.equal(got["nest"][1]["b"], b),
                torch.equal(got["c"], c), got["nest"][0]] == [True, True, True, 1]
    finally:
        shim.uninstall()
    with mock.patch.object(shim, "_reduce_tensor", wraps=shim._reduce_tensor) as spy:
        w.enqueue([a], timeout=T)
    assert spy.call_count == 0  # uninstalled: the queue's own rule, no hook
    assert torch.equal(r.dequeue(T)[0], a)


# --- ShmTensorArena over verifiedring's arena ------------------------------------------


def arena(n_reader: int, slot_bytes: int = 1 << 16, n_slots: int = 2) -> tuple[Any, list[Any]]:
    writer = shim.ShmTensorArena(n_reader, slot_bytes, n_slots)
    return writer, [shim.ShmTensorArena(*writer.handle(), reader_rank=i)
                    for i in range(n_reader)]


def view(reader: Any, idx: int, ref: torch.Tensor) -> torch.Tensor:
    return reader.get_tensor(idx, ref.numel() * ref.element_size(), ref.dtype, tuple(ref.shape))


def test_a_slot_is_reused_only_after_every_readers_view_is_gone_whatever_the_flushes() -> None:
    writer, readers = arena(2)
    t = torch.full((100,), 7, dtype=torch.int64)
    first = writer.write_tensor(t)
    views: list[Any] = [view(r, first, t) for r in readers]
    assert [torch.equal(v, t) for v in views] == [True, True]
    assert [r._pending_release for r in readers] == [[], []]  # nothing freed yet
    second = writer.write_tensor(t)
    assert (first, second, writer.write_tensor(t)) == (0, 1, None)
    with readers[0]._meta(first) as meta:
        assert bytes(meta) == b"\x01\x00\x00"  # written, no reader done
    for r in readers:
        r.flush_releases()  # vLLM 0.34: a flush releases no slot a view still holds
    assert ([r._pending_release for r in readers], writer.write_tensor(t)) == ([[], []], None)
    views[0] = None
    assert ([r._pending_release for r in readers], writer.write_tensor(t)) == (
        [[first], []], None)
    views[1] = None
    with readers[1]._meta(first) as meta:
        assert bytes(meta) == b"\x01\x01\x01"
    assert [r._pending_release for r in readers] == [[first], [first]]
    readers[0].flush_releases()
    assert [r._pending_release for r in readers] == [[], [first]]
    assert writer.write_tensor(t) == first
    assert [r._deferred_releases for r in readers] == [[], []]


def test_a_views_death_releases_its_slot_without_a_flush() -> None:
    writer, (reader,) = arena(1, n_slots=1)
    t = torch.arange(64, dtype=torch.float32)
    idx = writer.write_tensor(t)
    v = view(reader, idx, t)[8:]  # a slice keeps the storage
    gc.collect()
    assert (reader._pending_release, writer.write_tensor(t)) == ([], None)
    del v
    assert (reader._pending_release, writer.write_tensor(t)) == ([idx], idx)


def test_views_alias_the_one_mapping_and_the_slot_bytes() -> None:
    writer, (r0, r1) = arena(2)
    t = torch.arange(256, dtype=torch.float32).to(torch.float8_e4m3fn)
    idx = writer.write_tensor(t)
    a, b = view(r0, idx, t), view(r1, idx, t)
    assert a.dtype == torch.float8_e4m3fn
    assert torch.equal(a.view(torch.uint8), t.view(torch.uint8))
    a.view(torch.uint8)[0] = 0x42
    assert int(b.view(torch.uint8)[0]) == 0x42
    slot = torch.frombuffer(r0._slot(idx, 256), dtype=torch.uint8)
    assert a.data_ptr() == slot.data_ptr()
    assert (r0._pinned, writer._pinned) == (False, False)
    r0._ensure_pinned()
    assert r0._pinned is False
    del a, b, slot


def test_too_large_a_tensor_gets_no_slot() -> None:
    writer, _ = arena(1, slot_bytes=4096)
    assert writer.write_tensor(torch.zeros(4097, dtype=torch.uint8)) is None
    assert writer.write_tensor(torch.zeros(4096, dtype=torch.uint8)) == 0


def test_the_arena_pickler_diverts_only_what_qualifies(monkeypatch: pytest.MonkeyPatch) -> None:
    writer, (reader,) = arena(1, slot_bytes=MIB, n_slots=4)
    monkeypatch.setattr(shim, "_ARENA_MIN_BYTES", 64 * 1024)
    monkeypatch.setitem(shim._TENSOR_ARENAS, writer.shared_memory.name, reader)
    big = torch.arange(1 << 16, dtype=torch.float32)  # 256 KiB: arena
    param = torch.nn.Parameter(torch.ones(1 << 15), requires_grad=False)  # 128 KiB: arena
    small = torch.arange(100)  # below the minimum
    strided = torch.arange(1 << 17, dtype=torch.float32)[::2]  # not contiguous
    grad = torch.ones(1 << 15, requires_grad=True)
    with mock.patch.object(shim, "_reduce_tensor", wraps=shim._reduce_tensor) as spy:
        data, oob = dumps([big, param, small, strided, grad], writer)
    assert oob == []  # big and param are not in the stream, the rest is (in band)
    assert len(data) < small.nbytes + strided.nbytes + grad.nbytes + 4096
    # the arena's two never reach the dispatch table
    assert [id(c.args[0]) for c in spy.call_args_list] == [id(small), id(strided), id(grad)]
    out = pickle.loads(data, buffers=oob)
    sent = (big, param, small, strided, grad)
    assert [torch.equal(o.detach(), x.detach()) for o, x in zip(out, sent, strict=True)] == [
        True] * 5
    assert [type(o) for o in out] == [torch.Tensor, torch.nn.Parameter, torch.Tensor,
                                      torch.Tensor, torch.Tensor]
    assert reader._pending_release == []  # both views alive
    assert out[0].data_ptr() == torch.frombuffer(
        reader._slot(0, big.nbytes), dtype=torch.uint8).data_ptr()
    del out
    assert reader._pending_release == [1, 0]  # a list frees its items last first


# --- the queue with enable_shm_tensor_arena=True --------------------------------------


def test_the_queue_arena_speaks_vllms_names() -> None:
    shim.install()
    try:
        w: Any = MessageQueue(1, 1, max_chunk_bytes=4 * MIB, enable_shm_tensor_arena=True)
        r: Any = MessageQueue.create_from_handle(w.export_handle(), 0)
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        arena_w = w.tensor_arena
        assert isinstance(arena_w, shim.ShmTensorArena) and w.tensor_arena is arena_w
        name = arena_w.shared_memory.name
        assert shim._TENSOR_ARENAS[name] is r.tensor_arena
        huge = torch.arange(3 * MIB, dtype=torch.float32)  # 12 MiB: arena
        mid = torch.arange(MIB // 2, dtype=torch.float32)  # 2 MiB: out of band
        with mock.patch.object(shim, "_reduce_tensor", wraps=shim._reduce_tensor) as spy:
            w.enqueue({"huge": huge, "mid": mid}, timeout=T)
        assert [id(c.args[0]) for c in spy.call_args_list] == [id(mid)]
        got = r.dequeue(T)
        assert [torch.equal(got["huge"], huge), torch.equal(got["mid"], mid)] == [True, True]
        assert r.tensor_arena._pending_release == []  # its view is alive
        (idx,) = r._arena.viewed
        slot = r.tensor_arena._slot(idx, huge.nbytes)
        assert got["huge"].data_ptr() == torch.frombuffer(slot, dtype=torch.uint8).data_ptr()
        del got, slot
        assert r.tensor_arena._pending_release == [idx]
        r.close()
        w.close()
    finally:
        shim.uninstall()


def test_two_views_of_one_slot_keep_it_owed_until_both_are_gone() -> None:
    writer, (reader,) = arena(1, n_slots=1)
    t = torch.arange(32, dtype=torch.int32)
    idx = writer.write_tensor(t)
    first = view(reader, idx, t)
    second = reader.get_tensor(idx, 64, torch.int16, (32,))  # the first half, other dtype
    assert second.view(torch.int32).tolist() == list(range(16))
    del first
    assert (reader._pending_release, writer.write_tensor(t)) == ([], None)
    del second
    assert (reader._pending_release, writer.write_tensor(t)) == ([idx], idx)


def test_the_arena_facades_do_not_keep_a_dropped_queues_arenas_alive() -> None:
    import weakref

    from verifiedring.testing.faults import arena_of

    gc.collect()
    gc.disable()  # what is freed must be freed by reference counting, as with mq = None
    try:
        w: Any = MessageQueue(1, 1, enable_shm_tensor_arena=True)
        r: Any = MessageQueue.create_from_handle(w.export_handle(), 0)
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        facades = [w.tensor_arena, r.tensor_arena]
        name = facades[0].shared_memory.name
        arenas = [weakref.ref(arena_of(w)), weakref.ref(arena_of(r))]
        assert shim._TENSOR_ARENAS.get(name) is facades[1]
        w = r = None
        assert [a() for a in arenas] == [None, None]
        del facades
        assert name not in shim._TENSOR_ARENAS
    finally:
        gc.enable()


def test_a_tensor_from_a_ring_chunk_outlives_the_chunks_reuse_and_is_writable() -> None:
    w = MessageQueue(1, 1, max_chunk_bytes=4 * MIB, max_chunks=2)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    try:
        w.enqueue({"t": torch.full((MIB // 2,), 1.0)}, timeout=T)  # 2 MiB, out of band
        got = r.dequeue(T)["t"]
        for i in range(4):  # every chunk reused twice
            w.enqueue({"t": torch.full((MIB // 2,), float(i + 2))}, timeout=T)
            assert torch.equal(r.dequeue(T)["t"], torch.full((MIB // 2,), float(i + 2)))
        assert torch.equal(got, torch.full((MIB // 2,), 1.0))
        got += 1.0
        assert torch.equal(got, torch.full((MIB // 2,), 2.0))
    finally:
        r.close()
        w.close()


def test_a_readers_arena_is_registered_at_attach_survives_shutdown_and_goes_once_dropped(
) -> None:
    shim.install()
    try:
        w: Any = MessageQueue(1, 1, enable_shm_tensor_arena=True)
        r: Any = MessageQueue.create_from_handle(w.export_handle(), 0)
        n_reader, slot_bytes, n_slots, name = w.export_handle().tensor_arena_handle
        facade = r.tensor_arena
        assert (n_reader, slot_bytes, n_slots) == (1, facade.slot_bytes, facade.n_slots)
        del facade
        assert r.tensor_arena.shared_memory.name == name
        assert shim._TENSOR_ARENAS[name] is r.tensor_arena  # before any handshake
        r.shutdown()
        assert shim._TENSOR_ARENAS[name] is r.tensor_arena
        r.tensor_arena = None
        assert (name not in shim._TENSOR_ARENAS, r.tensor_arena) == (True, None)
        with pytest.raises(MisuseError, match="only be set to None"):
            r.tensor_arena = w.tensor_arena
        r.close()
        w.close()
    finally:
        shim.uninstall()
