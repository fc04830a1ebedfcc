"""tensor_dict: broadcast_tensor_dict coalesced vs one collective per tensor, over gloo.

Two payloads, each timed both ways in the same run (alternating) on 2 ranks:
10 small tensors (target: coalesced <= 0.2x per-tensor) and an ~8 MB mixed
dict (4 x 1 MiB, 2 x 2 MiB and 20 small tensors; target: no slower than
per-tensor), the latter with several ``large_bytes`` thresholds (tensors at
least that big skip the coalesced buffer).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench import _dist

MIB = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--iters", type=int, default=40, help="broadcasts per repeat")
    parser.add_argument("--repeats", type=int, default=3)


def _payloads() -> dict[str, dict[str, object]]:
    import torch

    from verifiedring.testing.samples import mixed_tensor_dict

    small = mixed_tensor_dict(1, n=10, max_numel=64)
    big: dict[str, object] = mixed_tensor_dict(2, n=20, max_numel=256)
    for i in range(4):
        big[f"mib{i}"] = torch.randn(MIB // 4)
    for i in range(2):
        big[f"two_mib{i}"] = torch.randint(0, 100, (MIB,), dtype=torch.int16)
    return {"10 small tensors": small, "8 MB mixed dict": big}


def _rank(rank: int, world: int, iters: int, repeats: int) -> dict[str, float]:
    from verifiedring.distributed import GroupBroadcaster, TransferOptions

    b = GroupBroadcaster.create(writer_rank=0, timeout=60)
    payloads = _payloads()
    variants = {
        "per-tensor": TransferOptions(coalesce=False),
        "coalesced (default large_bytes=256 KiB)": TransferOptions(),
        "coalesced (large_bytes=1 MiB)": TransferOptions(large_bytes=MIB),
        "coalesced (large_bytes=4 MiB)": TransferOptions(large_bytes=4 * MIB),
    }
    out: dict[str, float] = {}
    for _ in range(2):
        for pname, payload in payloads.items():
            for vname, options in variants.items():
                b.options = options
                mine = payload if rank == 0 else None

                def op(i: int, mine: Any = mine) -> object:
                    return b.broadcast_tensor_dict(mine, 0)

                t = _dist.per_op_seconds(op, iters, repeats)
                key = f"{pname} | {vname}"
                out[key] = min(out.get(key, t), t)
    b.close()
    return out


def main(args: argparse.Namespace | None = None) -> int:
    from bench import tensor_dict as mod
    from verifiedring.testing.launcher import run_group

    a = _dist.parse(mod, args)
    out = run_group(mod._rank, 2, args=(a.iters, a.repeats), timeout=900)[0]
    print(f"tensor_dict: broadcast_tensor_dict over gloo, 2 ranks, {a.iters} x {a.repeats}")
    rows = []
    for key, t in out.items():
        payload, variant = key.split(" | ")
        if variant != "per-tensor":
            rows.append((f"{payload}: {variant}", t, "per-tensor", out[f"{payload} | per-tensor"]))
    _dist.report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
