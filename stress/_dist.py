"""Shared body of ``stress gloo`` and ``stress nccl``: mixed broadcasts, checked exactly.

Every step the queue's writer draws an operation and a seed and broadcasts
them (so all ranks agree on what comes next and when to stop); every rank then
rebuilds the expected payload from the seed and checks what it got bit for bit:
objects, tensor dicts (coalesced, special tensors, random src) and path refills
(walk and compiled plan). Ranks return how many steps of each kind they
checked; the parent fails on any rank's exception, or at ``--time-limit``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

from ._progress import Progress, Tally, interval, record

DEFAULT_STEPS = 300
OPS = ("object", "tensor_dict", "special", "nested_walk", "nested_plan")


def add_arguments(parser: argparse.ArgumentParser, default_world: int) -> None:
    parser.add_argument("--world-size", type=int, default=default_world, metavar="N")
    parser.add_argument("--writer-rank", type=int, default=None, metavar="R",
                        help="the queue's writer (default: the last rank)")
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help=f"steps to run (default {DEFAULT_STEPS}; unlimited with --duration)")
    parser.add_argument("--time-limit", type=float, default=None, metavar="S",
                        help="kill everything and fail after S seconds (default: duration + 90)")


def rank_body(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, int]:
    import torch.distributed as dist

    from verifiedring.distributed import GroupBroadcaster, PlanCache
    from verifiedring.testing.samples import (
        assert_mirrors,
        blank_like,
        mixed_tensor_dict,
        nested_metadata,
        special_tensors,
    )

    device = cfg["device"]
    nccl = device == "cuda" and cfg["backend"] == "nccl"
    cpu_group = dist.new_group(backend="gloo") if nccl else None
    b = GroupBroadcaster.create(
        cpu_group, writer_rank=cfg["writer"], device_group=dist.group.WORLD if nccl else None,
        timeout=60,
    )
    rng = random.Random(cfg["seed"])
    tally = Tally(cfg["progress"], world, rank, every=1)  # a step takes milliseconds
    cache = PlanCache()
    mine = blank_like(nested_metadata(0, device))
    counts = dict.fromkeys(OPS, 0)
    deadline = None if cfg["duration"] is None else time.monotonic() + cfg["duration"]
    step = 0
    while True:
        order = None
        if b.rank == b.queue_src:
            done = (cfg["steps"] is not None and step >= cfg["steps"]) or (
                deadline is not None and time.monotonic() >= deadline
            )
            if not done:
                order = (rng.choice(OPS), rng.randrange(1 << 30), rng.randrange(world))
        order = b.broadcast_object(order, src=b.queue_src)
        if order is None:
            break
        op, seed, src = order
        step += 1
        if op == "object":
            expected: Any = {"seed": seed, "blob": random.Random(seed).randbytes(seed % 5000),
                        "nested": [seed, (seed, None), {seed % 7: "v"}]}
            got = b.broadcast_object(expected if b.rank == b.queue_src else None, b.queue_src)
            if got != expected:
                raise AssertionError(f"step {step}: object differs")
        elif op in ("tensor_dict", "special"):
            expected = (mixed_tensor_dict(seed, 1 + seed % 60, device) if op == "tensor_dict"
                        else special_tensors(seed, device))
            got = b.broadcast_tensor_dict(expected if b.rank == src else None, src=src)
            assert_mirrors(expected, got)
        else:
            expected = nested_metadata(seed, device)
            use = cache if op == "nested_plan" else None
            if b.rank == b.queue_src:
                b.broadcast_nested(expected, b.queue_src, use)
            else:
                mine = b.broadcast_nested(mine, b.queue_src, use)
                assert_mirrors(expected, mine)
        counts[op] += 1
        tally.note(step)
    tally.close(step)
    b.close()
    return counts


def run(args: argparse.Namespace, kind: str, backend: str, device: str) -> int:
    from verifiedring.testing.launcher import run_group

    world = args.world_size
    steps = args.steps if args.steps is not None or args.duration is not None else DEFAULT_STEPS
    cfg = {
        "seed": args.seed, "steps": steps, "duration": args.duration, "device": device,
        "backend": backend, "writer": world - 1 if args.writer_rank is None else args.writer_rank,
    }
    limit = args.time_limit or (args.duration or 0.0) + 90.0
    start = time.monotonic()
    errors: list[str] = []
    counts: list[dict[str, int]] = []
    with Progress(kind, [f"rank {r}" for r in range(world)], interval(args)) as shown:
        cfg["progress"] = shown.path
        try:
            counts = run_group(rank_body, world, args=(cfg,), backend=backend, timeout=limit)
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
    ok = not errors and all(c == counts[0] for c in counts)
    # each step's payload is checked by every rank but its source: world - 1 readers
    steps = sum(counts[0].values()) if counts else 0
    record(kind, ok, [steps] * (world - 1), time.monotonic() - start)
    summary = {"kind": kind, "ok": ok, "world_size": world, "writer_rank": cfg["writer"],
               "steps": counts[0] if counts else {}, "seconds": round(time.monotonic() - start, 3),
               "seed": args.seed, "errors": errors}
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"stress {kind}: {'ok' if ok else 'FAILED'}: {summary['steps']} on {world} ranks "
              f"in {summary['seconds']} s, seed={args.seed}", flush=True)
        for err in errors:
            print(f"  {err}", file=sys.stderr)
    return 0 if ok else 1


def skip(args: argparse.Namespace, kind: str, reason: str) -> int:
    """Report a clean skip (exit 0) where the hardware is missing."""
    if args.json:
        print(json.dumps({"kind": kind, "ok": True, "skipped": reason, "errors": []}), flush=True)
    else:
        print(f"stress {kind}: skipped: {reason}", flush=True)
    return 0
