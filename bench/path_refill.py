"""path_refill: a compiled RefillPlan vs walking the structure, per step, no process group.

Metadata of ~50 leaves and 10 tensors (dataclasses, dicts with int and dotted
keys, a defaultdict, lists, a tuple, a shared reference). A step is the
sender's collect plus the receiver's refill of its own object (the tensor
bytes are left out: both ways move them the same). Reported per step and as
the ratio walk / plan (target >= 3x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from bench import _dist


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--iters", type=int, default=2000, help="steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)


@dataclass
class Seq:
    seq_id: int
    block_table: list[int]
    sampling: dict[str, Any]


@dataclass
class Batch:
    seqs: list[Seq]
    by_layer: dict[int, Any]
    knobs: dict[str, Any]
    counts: defaultdict[str, int]
    shape: tuple[int, int]


def _metadata(step: int) -> Batch:
    import torch

    seqs = [
        Seq(i, [step, i], {"temperature": 0.7, "top_p": 0.9, "top.k": 50 + i}) for i in range(8)
    ]
    shared = torch.zeros(4)
    layers: dict[int, Any] = {i: torch.full((16,), float(step)) for i in range(8)}
    layers[100] = shared
    counts: defaultdict[str, int] = defaultdict(int, {"prefill": step, "decode": 8})
    return Batch(seqs, layers, {"a.b": step, "mode": "decode", "pos": shared, "none": None,
                               "t": torch.ones(3)}, counts, (8, step))


def _time(fn: Any, iters: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(iters):
            fn(i)
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def main(args: argparse.Namespace | None = None) -> int:
    from bench import path_refill as mod
    from verifiedring.distributed.paths import apply, collect, refill
    from verifiedring.distributed.plan import RefillPlan
    from verifiedring.distributed.transfer import TensorMeta
    from verifiedring.testing.samples import blank_like

    a = _dist.parse(mod, args)
    sender = _metadata(1)
    receiver = refill(sender, blank_like(sender))
    send_plan, recv_plan = RefillPlan(sender), RefillPlan(receiver)
    msg, tensors = collect(sender)
    n_leaves = sum(1 for n in msg.nodes if n[0] == 0)

    def walk(i: int) -> None:
        m, _ = collect(sender)
        apply(m, receiver)

    def plan(i: int) -> None:
        leaves, ts = send_plan.collect(sender)
        recv_plan.apply(receiver, leaves, [TensorMeta.of(t) for t in ts])

    t_walk = t_plan = float("inf")
    for _ in range(2):  # alternate
        t_walk = min(t_walk, _time(walk, a.iters, a.repeats))
        t_plan = min(t_plan, _time(plan, a.iters, a.repeats))
    print(f"path_refill: {n_leaves} leaves, {len(tensors)} tensors, {a.iters} x {a.repeats}")
    _dist.report([("plan (compiled accessors)", t_plan, "walk (collect + apply)", t_walk)])
    print(f"  walk / plan = {t_walk / t_plan:.1f}x faster with the plan", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
