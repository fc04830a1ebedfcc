"""interrupt_guards: what each way of keeping an asynchronous exception out of a protocol
step costs per enqueue + dequeue, as a ratio to the plain pair of the same run.

One process holds a writer and its one local reader (:func:`bench.per_op.cpu_per_pair`'s
setup); ``time.process_time_ns`` over ``--ops`` pairs of a 1 KiB ``bytes``. Sides, each
the same pair with a candidate around it (the reps of all sides shuffled):

* ``pair``: the library as it is: its steps record their intent with plain stores
  (write-ahead: a decoded object owed, a held chunk let go at the next call), which
  is what it chose; the baseline;
* ``sigmask``: delivery deferred by blocking every signal around each call
  (``pthread_sigmask`` twice per call) -- the only deferral that also covers an
  application's own handlers; it still lets a signal already pending run at the
  first check inside, and a process-directed signal land on another thread;
* ``ki_frame``: trio's KeyboardInterrupt protection: each call through a wrapper
  whose frame carries the protection flag (the handler looks for it; only a handler
  the library installs can);
* ``native``: each step's stores in one C call: four extra C calls per pair (the
  fence's, as their stand-in: the stores themselves are already paid in ``pair``).

Writes ``<out>/interrupt_guards.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .per_op import SIZE, _close, _connected_pair
from .reps import shuffled

SIDES = ("pair", "sigmask", "ki_frame", "native")
_ALL = set(signal.valid_signals())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="bench/results",
                        help="directory for interrupt_guards.json")
    parser.add_argument("--ops", type=int, default=20_000, help="enqueue + dequeue pairs per rep")
    parser.add_argument("--repeats", type=int, default=5, help="reps of every side")
    parser.add_argument("--seed", type=int, default=30, help="the shuffle's seed")


def _masked(call: Callable[..., Any]) -> Callable[..., Any]:
    mask = signal.pthread_sigmask

    def guarded(*args: Any) -> Any:
        old = mask(signal.SIG_BLOCK, _ALL)
        try:
            return call(*args)
        finally:
            mask(signal.SIG_SETMASK, old)

    return guarded


def _ki_frame(call: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any) -> Any:
        locals()["@KI_PROTECTION_ENABLED"] = True  # trio's marker, as its wrapper sets it
        return call(*args)

    return guarded


def _native(call: Callable[..., Any]) -> Callable[..., Any]:
    from verifiedring._fence import fence

    def guarded(*args: Any) -> Any:
        fence()
        fence()
        return call(*args)

    return guarded


_GUARDS: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "sigmask": _masked, "ki_frame": _ki_frame, "native": _native,
}


def cpu_per_pair(writer: Any, reader: Any, side: str, ops: int, payload: bytes) -> float:
    enqueue, dequeue = writer.enqueue, reader.dequeue
    guard = _GUARDS.get(side)
    if guard is not None:
        enqueue, dequeue = guard(enqueue), guard(dequeue)
    t = time.process_time_ns()
    for _ in range(ops):
        enqueue(payload)
        got = dequeue()
    spent = time.process_time_ns() - t
    if got != payload:
        raise AssertionError(f"{side}: the reader got another object")
    return spent / ops


def main(args: argparse.Namespace) -> int:
    payload = os.urandom(SIZE)
    writer, reader = _connected_pair("verifiedring")
    reps: dict[str, list[float]] = {s: [] for s in SIDES}
    try:
        cpu_per_pair(writer, reader, "pair", max(args.ops // 10, 10), payload)  # warm
        for side in shuffled(list(SIDES), args.repeats, args.seed):
            reps[side].append(cpu_per_pair(writer, reader, side, args.ops, payload))
    finally:
        _close(reader, writer)
    base = statistics.median(reps["pair"])
    result = {"seed": args.seed, "ops": args.ops, "size": SIZE, "cpu_ns_per_pair": {
        s: {"median_ns": statistics.median(xs), "reps_ns": xs,
            "ratio_to_pair": round(statistics.median(xs) / base, 3)}
        for s, xs in reps.items()
    }}
    for s, r in result["cpu_ns_per_pair"].items():
        print(f"{s:<10} {r['median_ns']:>9.0f} ns per pair  x{r['ratio_to_pair']}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "interrupt_guards.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0
