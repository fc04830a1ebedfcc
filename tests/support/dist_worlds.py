"""Rank bodies for the multiprocess dist tests (run by verifiedring.testing.launcher.run_group).

Each body checks what it receives against values it builds itself from the
same seeds (bit for bit), raises AssertionError on the first difference, and
returns a small summary the parent compares across ranks. Several features are
checked in one spawned world, as starting one costs seconds.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
import torch.distributed as dist

from verifiedring.distributed import GroupBroadcaster, PlanCache, TransferOptions, WorkerGroup
from verifiedring.errors import BrokenPeerError
from verifiedring.testing.samples import (
    assert_bits_equal,
    assert_mirrors,
    blank_like,
    mixed_tensor_dict,
    nested_metadata,
    special_tensors,
)

SMALL_SINGLES = TransferOptions(large_bytes=64 << 10)  # "large" in special_tensors goes alone


def check_dict(expected: dict[Any, Any], got: dict[Any, Any], device: str) -> None:
    if list(expected) != list(got):
        raise AssertionError(f"keys {list(got)} != {list(expected)}")
    for k, v in expected.items():
        if isinstance(v, torch.Tensor):
            if got[k].device.type != device:
                raise AssertionError(f"{k!r}: on {got[k].device}, expected {device}")
            assert_bits_equal(v, got[k], repr(k))
        elif got[k] != v:
            raise AssertionError(f"{k!r}: {got[k]!r} != {v!r}")


def exercise_broadcaster(b: GroupBroadcaster, device: str, seed: int) -> int:
    """Objects, tensor dicts (coalesced, special, any src) and nested refill on ``b``.

    Returns the number of checks run. Every rank of ``b``'s group calls this.
    """
    checks = 0
    writer = b.queue_src
    for i in range(20):
        obj = {"i": i, "payload": bytes(range(i % 256)) * 10}
        got = b.broadcast_object(obj if b.rank == writer else None, src=writer)
        if got != obj:
            raise AssertionError(f"object {i}: {got!r}")
        checks += 1
    for src in range(b.world_size):  # the queue's writer and every other rank
        for make in (
            lambda s: mixed_tensor_dict(s, 50, device),
            lambda s: special_tensors(s, device),
        ):
            expected = make(seed + src)
            got = b.broadcast_tensor_dict(expected if b.rank == src else None, src=src)
            check_dict(expected, got, device)
            checks += 1
    # Path refill: walk mode, then a plan over steps where a tensor changes shape.
    cache = PlanCache()
    mine = blank_like(nested_metadata(0, device))
    for step in range(4):
        for use_cache in (None, cache):
            sent = nested_metadata(seed + step, device)
            if step == 3:
                sent.by_int[3] = torch.arange(5, dtype=torch.bfloat16, device=device)
            if b.rank == writer:
                got = b.broadcast_nested(sent, src=writer, cache=use_cache)
            else:
                got = b.broadcast_nested(mine, src=writer, cache=use_cache)
                mine = got
            assert_mirrors(sent, got)
            checks += 1
    # In-place receive into non-contiguous receiver tensors, from a non-writer src.
    src = (writer + 1) % b.world_size
    holder = {"nc": torch.zeros(4, 6, device=device).t(), "x": 0}
    before = holder["nc"]
    moved = {"nc": torch.arange(24.0, device=device).reshape(6, 4), "x": 5}
    got = b.broadcast_nested(moved if b.rank == src else holder, src=src)
    assert_mirrors(moved, got)
    if b.rank != src and got["nc"] is not before:
        raise AssertionError("a matching receiver tensor was replaced, not filled in place")
    return checks + 1


class Target:
    """What the worker tests call: records the calls it ran, in order."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.log = hashlib.sha256()
        self.count = 0

    def step(self, i: int, data: Any = None, driver_only: int = 0) -> int:
        self.log.update(repr((i, data)).encode())
        self.count += 1
        return i * 2 + driver_only

    def fail_on(self, rank: int) -> None:
        if self.rank == rank:
            raise ValueError(f"planned failure on rank {rank}")


def exercise_workers(b: GroupBroadcaster, calls: int, failing_rank: int) -> tuple[int, str]:
    """``calls`` method calls then stop; then one planned worker exception."""
    target = Target(b.rank)
    for ack_every in (100, 1):
        wg = WorkerGroup(b, target, ack_every=ack_every)
        if wg.is_driver:
            n = calls if ack_every == 100 else 10
            for i in range(n):
                r = wg.run_workers("step", driver_kwargs={"driver_only": 1}, i=i, data=[i] * 3)
                if r != i * 2 + 1:
                    raise AssertionError(f"call {i} returned {r}")
            if ack_every == 1:
                try:
                    wg.run_workers("fail_on", rank=failing_rank)
                except BrokenPeerError as e:
                    text = str(e)
                    if f"worker rank {failing_rank} raised" not in text or "planned" not in text:
                        raise AssertionError(f"unexpected report: {e}") from e
                else:
                    raise AssertionError("the worker's exception was not reported")
                wg.run_workers("step", i=-1)  # the group still works after a reported error
            wg.stop_workers()
        else:
            wg.worker_loop()
    return target.count, target.log.hexdigest()


def world_local(rank: int, world: int) -> dict[str, Any]:
    """World of 3 on one host: writer rank 2, subgroup [1, 2], workers."""
    out: dict[str, Any] = {}
    b = GroupBroadcaster.create(writer_rank=2, timeout=60)
    assert b.queue is not None
    out["local"] = getattr(b.queue, "is_local_reader", None) if rank != 2 else "writer"
    sub = dist.new_group([1, 2])
    if rank in (1, 2):
        sb = GroupBroadcaster.create(sub, writer_rank=1, options=SMALL_SINGLES, timeout=60)
        if sb.global_ranks != [1, 2] or sb.rank != rank - 1:
            raise AssertionError(f"subgroup ranks {sb.global_ranks}, rank {sb.rank}")
        out["sub_checks"] = exercise_broadcaster(sb, "cpu", seed=100)
        sb.close()
    out["workers"] = exercise_workers(b, calls=1000, failing_rank=1)
    b.close()
    return out


def world_remote(rank: int, world: int) -> dict[str, Any]:
    """World of 2 where rank 1 is on "another host": its reader is remote (TCP)."""
    b = GroupBroadcaster.create(writer_rank=0, timeout=60)
    assert b.queue is not None
    remote = getattr(b.queue, "is_remote_reader", None) if rank == 1 else "writer"
    checks = exercise_broadcaster(b, "cpu", seed=7)
    b.close()
    return {"remote": remote, "checks": checks}


def world_device(rank: int, world: int, nccl: bool) -> int:
    """CUDA tensors: over NCCL (one GPU per rank) or over gloo (ranks share a GPU)."""
    cpu_group = dist.new_group(backend="gloo") if nccl else None
    device_group = dist.group.WORLD if nccl else None
    b = GroupBroadcaster.create(cpu_group, writer_rank=world - 1, device_group=device_group)
    checks = exercise_broadcaster(b, "cuda", seed=11)
    mixed = {**mixed_tensor_dict(3, 10, "cuda"), **mixed_tensor_dict(4, 5, "cpu")}
    mixed = {f"{k}{i}": v for i, (k, v) in enumerate(mixed.items())}
    got = b.broadcast_tensor_dict(mixed if b.rank == 0 else None, src=0)
    for k, v in mixed.items():
        if isinstance(v, torch.Tensor):
            assert got[k].device.type == v.device.type
            assert_bits_equal(v, got[k], k)
    b.close()
    return checks + 1
