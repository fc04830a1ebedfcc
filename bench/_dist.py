"""Helpers of the dist benches: argument handling and collective timing."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from types import ModuleType


def parse(module: ModuleType, args: argparse.Namespace | None) -> argparse.Namespace:
    """``args`` as given by ``python -m bench``, or parsed from the command line."""
    if args is not None:
        return args
    prog = f"python -m {module.__name__}"
    parser = argparse.ArgumentParser(prog=prog, description=module.__doc__)
    module.add_arguments(parser)
    return parser.parse_args()


def per_op_seconds(op: Callable[[int], object], iters: int, repeats: int) -> float:
    """Median over ``repeats`` of (time of ``iters`` calls of ``op(i)`` + a barrier) / iters.

    Collective: every rank of the default group calls it. The closing barrier
    makes a writer that runs ahead of its readers pay for them.
    """
    import torch.distributed as dist

    samples = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        for i in range(iters):
            op(i)
        dist.barrier()
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def report(rows: list[tuple[str, float, str, float]]) -> None:
    """Print ``name: x us vs baseline y us = ratio`` lines."""
    for name, t, base_name, base in rows:
        print(f"  {name:<44} {t * 1e6:10.1f} us  vs {base_name:<28} {base * 1e6:10.1f} us"
              f"  ratio {t / base:6.3f}x", flush=True)
