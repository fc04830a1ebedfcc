"""nccl: the gloo soak with CUDA tensors over NCCL (one GPU per rank); skips without 2 GPUs.

Objects go through the MessageQueue over a gloo CPU group, tensors over the
NCCL default group. Exits 0 with "skipped" where CUDA has fewer than 2 GPUs.
"""

from __future__ import annotations

import argparse

from . import _dist


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _dist.add_arguments(parser, default_world=2)


def main(args: argparse.Namespace) -> int:
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        return _dist.skip(args, "nccl", f"NCCL needs one GPU per rank: >= 2 GPUs, found {n}")
    if args.world_size > n:
        return _dist.skip(args, "nccl", f"--world-size {args.world_size} > {n} GPUs")
    return _dist.run(args, "nccl", backend="nccl", device="cuda")
