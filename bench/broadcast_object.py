"""broadcast_object: the MessageQueue's broadcast_object vs gloo broadcast_object_list.

A 1 KiB object from one rank to the rest of the same group (default 2 ranks,
one host), both measured in the same run, alternating; reported per broadcast
and as a ratio (queue / gloo; the target is <= 1/30). Also the method-call
broadcast (WorkerGroup.run_workers of a no-op) with an ack every call vs acks
only at sync/stop, to show what waiting for acks costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from bench import _dist


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--iters", type=int, default=300, help="broadcasts per repeat")
    parser.add_argument("--repeats", type=int, default=3)


class _Noop:
    def noop(self, i: int) -> int:
        return i


def _rank(rank: int, world: int, iters: int, repeats: int) -> dict[str, float]:
    from verifiedring.distributed import CollectiveChannel, GroupBroadcaster, WorkerGroup

    b = GroupBroadcaster.create(writer_rank=0, timeout=60)
    assert b.queue is not None
    gloo = CollectiveChannel(None, 0)
    obj = {"blob": b"x" * 1000, "step": 1}
    mine = obj if rank == 0 else None
    out: dict[str, float] = {}
    for _ in range(2):  # alternate: queue, gloo, queue, gloo
        for name, ch in (("queue", b.queue), ("gloo", gloo)):
            def op(i: int, ch: Any = ch) -> object:
                return ch.broadcast_object(mine)

            t = _dist.per_op_seconds(op, iters, repeats)
            out[name] = min(out.get(name, t), t)
    for ack_every in (1, 0):
        wg = WorkerGroup(b, _Noop(), ack_every=ack_every)
        if wg.is_driver:
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for i in range(iters):
                    wg.run_workers("noop", i=i)
                wg.sync()  # the workers have run every call
                samples.append((time.perf_counter() - t0) / iters)
            wg.stop_workers()
            out[f"ack_every={ack_every}"] = statistics.median(samples)
        else:
            wg.worker_loop()
    b.close()
    return out


def main(args: argparse.Namespace | None = None) -> int:
    from bench import broadcast_object as mod
    from verifiedring.testing.launcher import run_group

    a = _dist.parse(mod, args)
    out = run_group(mod._rank, a.world_size, args=(a.iters, a.repeats), timeout=600)[0]
    print(f"broadcast_object: 1 KiB object, {a.world_size} ranks, {a.iters} x {a.repeats}")
    _dist.report([
        ("MessageQueue.broadcast_object", out["queue"], "gloo broadcast_object_list", out["gloo"]),
        ("run_workers, ack only at sync/stop", out["ack_every=0"],
         "run_workers, ack every call", out["ack_every=1"]),
    ])
    return 0


if __name__ == "__main__":
    sys.exit(main())
