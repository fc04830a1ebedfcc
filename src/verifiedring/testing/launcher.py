"""Spawn a bounded torch.distributed world and collect each rank's result.

:func:`run_group` is what the tests, ``stress/gloo.py``, ``stress/nccl.py`` and
the benches use: ``spawn`` processes, a FileStore rendezvous in a fresh
temporary directory (no port races), one thread per process, every collective
bounded by ``collective_timeout``, the whole run bounded by ``timeout``. A rank
that raises is reported with its rank and traceback; ranks still running after
a failure (likely blocked in a collective with the failed rank) get a short
grace period, then are killed, as are all ranks at the deadline. Only the
processes this call started are ever killed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from ..errors import BrokenPeerError, RingTimeoutError

FAILURE_GRACE = 5.0


def _entry(
    rank: int,
    world_size: int,
    init_file: str,
    backend: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    results: Any,
    collective_timeout: float,
    env: Mapping[str, str],
) -> None:
    os.environ.update(env)
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        if "nccl" in backend and torch.cuda.is_available():
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(
            backend,
            init_method=f"file://{init_file}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=collective_timeout),
        )
        try:
            value = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        results.put((rank, True, value))
    except BaseException as e:
        results.put((rank, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run_group(
    fn: Callable[..., Any],
    world_size: int,
    *,
    args: tuple[Any, ...] = (),
    backend: str = "gloo",
    timeout: float = 120.0,
    collective_timeout: float = 60.0,
    rank_env: Mapping[int, Mapping[str, str]] | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` spawned ranks.

    ``fn`` must be importable by name (a module-level function). Returns the
    ranks' return values in rank order. Raises BrokenPeerError naming every
    rank that raised or died, RingTimeoutError naming the ranks still running
    at ``timeout``.
    """
    ctx = mp.get_context("spawn")
    results: Any = ctx.Queue()
    env = rank_env or {}
    with tempfile.TemporaryDirectory(prefix="verifiedring-pg-") as tmp:
        init_file = os.path.join(tmp, "store")
        procs = [
            ctx.Process(
                target=_entry,
                args=(
                    r,
                    world_size,
                    init_file,
                    backend,
                    fn,
                    args,
                    results,
                    collective_timeout,
                    dict(env.get(r, {})),
                ),
                name=f"verifiedring-rank{r}",
            )
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        try:
            return _collect(procs, results, timeout)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(5.0)


def _collect(procs: list[Any], results: Any, timeout: float) -> list[Any]:
    world_size = len(procs)
    values: dict[int, Any] = {}
    failures: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    while len(values) + len(failures) < world_size:
        now = time.monotonic()
        if now >= deadline:
            break
        try:
            rank, ok, value = results.get(timeout=min(0.2, deadline - now))
        except queue_mod.Empty:
            for r, p in enumerate(procs):
                if r not in values and r not in failures and p.exitcode not in (None, 0):
                    failures[r] = f"died with exit code {p.exitcode} before reporting"
            continue
        if ok:
            values[rank] = value
        else:
            failures[rank] = value
        if failures:
            deadline = min(deadline, time.monotonic() + FAILURE_GRACE)
    if failures:
        text = "\n".join(f"rank {r} failed: {failures[r]}" for r in sorted(failures))
        raise BrokenPeerError(f"{len(failures)} of {world_size} ranks failed:\n{text}")
    if len(values) < world_size:
        missing = [r for r in range(world_size) if r not in values]
        raise RingTimeoutError(f"ranks {missing} did not finish within {timeout:.0f} s")
    return [values[r] for r in range(world_size)]
