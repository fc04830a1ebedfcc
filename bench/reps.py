"""reps: repeats run in a shuffled order, their medians, and the long-lived workers.

A bench that compares sides (transports, queues) runs every side ``repeats`` times
in the order ``random.Random(seed)`` shuffles (:func:`shuffled`), so a drift of the
machine's load falls on every side alike rather than on the side measured last;
:func:`merge` turns the reps of one side into one row holding their median.
:class:`Workers` runs a call for a side either here or in that side's own worker
process, started once and kept for the whole run (a vLLM anchor must be: both
versions are the package ``vllm``).
"""

from __future__ import annotations

import multiprocessing as mp
import random
import statistics
from collections.abc import Callable, Collection
from concurrent.futures import ProcessPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")
WAIT = 600.0  # the longest one call in a worker may take


def shuffled(items: list[T], repeats: int, seed: int) -> list[T]:
    """Every item ``repeats`` times, in the order ``random.Random(seed)`` shuffles."""
    order = [item for _ in range(repeats) for item in items]
    random.Random(seed).shuffle(order)
    return order


def merge(reps: list[dict[str, Any]], keys: Collection[str]) -> dict[str, Any]:
    """One row from the reps of one side: the first rep's fields, each of ``keys`` the
    median of the reps (and the reps themselves under ``reps_<key>``)."""
    row = dict(reps[0])
    for key in keys:
        values = [r[key] for r in reps]
        row[key] = statistics.median(values)
        row[f"reps_{key}"] = values
    return row


class Workers:
    """Calls for the sides in ``isolate`` run in that side's own spawned worker (one
    per side, started at its first call, kept until :meth:`close`); the others here."""

    def __init__(self, isolate: Collection[str]) -> None:
        self.isolate = set(isolate)
        self._pools: dict[str, ProcessPoolExecutor] = {}

    def run(self, side: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, for ``side``."""
        if side not in self.isolate:
            return fn(*args)
        pool = self._pools.get(side)
        if pool is None:
            pool = self._pools[side] = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))
        return pool.submit(fn, *args).result(WAIT)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown()
        self._pools.clear()

    def __enter__(self) -> Workers:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
