"""stall_ages: what the stall lines' times cost per enqueue + dequeue (issue 28, item 5).

Each publish of the writer stores the time in its chunk's slot (``LocalTransmitter.
published_at``), each take of a local reader its own time (``ReaderWaits.took_at``,
stored by ``LocalPath.take``): one
``time.monotonic()`` and one store on each side. One process holds a
``MessageQueue(1, 1)`` writer and its local reader (as :mod:`bench.per_op`), and times
``time.process_time_ns`` over ``--ops`` enqueue + dequeue pairs of a 1 KiB ``bytes``,
two ways interleaved rep by rep in the same run:

* ``stamped``: the code as shipped;
* ``unstamped``: the modules' ``monotonic`` replaced by ``int`` (returns 0 at once: the
  clock reads gone, the calls and stores left).

Also the two added statements alone (``timeit``: ``at[i] = monotonic()`` and
``r._took_at = monotonic()``), as a share of a stamped pair. Figures: the median ns per
pair of each way, their ratio, and the statements' share. Prints them and writes
``<out>/stall_ages.json``. About 10 s with the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import timeit
from pathlib import Path
from typing import Any

from verifiedring.queue import local_path, transmitters

from .per_op import SIZE, _close, _connected_pair

WAYS = ("stamped", "unstamped")
#: The modules whose clock reads stamp the two sides (each must read ``monotonic``).
_MODULES = (transmitters, local_path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="bench/results", help="directory for stall_ages.json")
    parser.add_argument("--ops", type=int, default=20_000, help="enqueue + dequeue pairs per rep")
    parser.add_argument("--repeats", type=int, default=7, help="reps of each way")


def _pairs(writer: Any, reader: Any, payload: bytes, ops: int) -> float:
    enqueue, dequeue = writer.enqueue, reader.dequeue
    t = time.process_time_ns()
    for _ in range(ops):
        enqueue(payload)
        dequeue()
    return (time.process_time_ns() - t) / ops


def measure(args: argparse.Namespace) -> dict[str, Any]:
    stale = [m.__name__ for m in _MODULES if not hasattr(m, "monotonic")]
    if stale:  # the stamp moved: patching these would measure nothing
        raise SystemExit(f"stall_ages: {stale} no longer read monotonic: update _MODULES")
    payload = os.urandom(SIZE)
    writer, reader = _connected_pair("verifiedring")
    reps: dict[str, list[float]] = {w: [] for w in WAYS}
    try:
        _pairs(writer, reader, payload, max(args.ops // 10, 10))  # warm
        for _ in range(args.repeats):
            for way in WAYS:
                for m in _MODULES:
                    m.monotonic = time.monotonic if way == "stamped" else int  # type: ignore[attr-defined]
                reps[way].append(_pairs(writer, reader, payload, args.ops))
    finally:
        for m in _MODULES:
            m.monotonic = time.monotonic  # type: ignore[attr-defined]
        _close(reader, writer)
    at, n = [0.0] * 8, 1_000_000
    alone = timeit.timeit("at[3] = monotonic(); r._took_at = monotonic()", number=n, globals={
        "at": at, "monotonic": time.monotonic, "r": argparse.Namespace()}) / n * 1e9
    stamped, unstamped = (statistics.median(reps[w]) for w in WAYS)
    return {
        "ops": args.ops, "size": SIZE,
        "ns_per_pair": {w: {"median": statistics.median(xs), "reps": xs} for w, xs in reps.items()},
        "ratio_stamped_to_unstamped": round(stamped / unstamped, 4),
        "statements_alone_ns": round(alone, 1),
        "statements_share_of_pair": round(alone / stamped, 4),
    }


def main(args: argparse.Namespace) -> int:
    result = measure(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stall_ages.json").write_text(json.dumps(result, indent=2) + "\n")
    pairs = result["ns_per_pair"]
    print(f"ns per enqueue + dequeue: stamped {pairs['stamped']['median']:.0f}, unstamped "
          f"{pairs['unstamped']['median']:.0f} (ratio {result['ratio_stamped_to_unstamped']}); "
          f"the two stamps alone {result['statements_alone_ns']} ns "
          f"({result['statements_share_of_pair']:.2%} of a pair)")
    return 0
