"""spin_readable: vLLM 0.34's step-loop wait, ``spin_until_readable`` (futex) vs a bare yield loop.

Two processes and two ``MessageQueue(1, 1)`` (A -> B and B -> A). B waits for each
message as vLLM's ``EngineCore._wait_for_output`` does: ``readable()``, else a short
wait with a ``pending`` deque and a deadline one second out, then ``dequeue``. Two
methods, in the same run, interleaved message by message:

* ``futex`` (what ``spin_until_readable`` does): :func:`verifiedring.waiting.wait_for`,
  a 1 ms spin, then the reader's futex sleep in blocks of at most 1 ms (so ``pending``
  is looked at that often), woken by the writer's publish;
* ``yield`` (the baseline, vLLM 0.34's loop): ``readable()`` and ``os.sched_yield()``
  until a message is at the head.

Figures: the one-way latency of a message sent after an idle gap (A stamps
``time.monotonic_ns()`` right before ``enqueue``, B subtracts when ``dequeue`` returns),
p50 and p90 per gap, and B's CPU per message (``getrusage``); then each as a ratio
futex / yield. The default run takes about half a minute.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import statistics
import time
from typing import Any

from verifiedring import Handle, MessageQueue
from verifiedring.testing.launcher import Supervisor, Task, channel, raise_for

WAIT = 30.0
METHODS = ("futex", "yield")
GAPS = (0.0, 0.001, 0.01, 0.1)
STOP = -1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=40, help="messages per gap and method")


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _wait_yield(q: Any) -> None:
    while not q.readable():
        os.sched_yield()


def _wait_futex(q: Any) -> None:
    pending: collections.deque[Any] = collections.deque()
    while not q.readable():
        q.spin_until_readable(pending, time.monotonic() + 1.0)


def _process_b(to_b: Handle) -> None:
    """B: its writer's handle to A through the supervisor's channel, then per message
    the method (one message), the wait by that method, the stamp, a reply."""
    r = MessageQueue.create_from_handle(to_b, 0)
    w = MessageQueue(1, 1)
    try:
        channel().send(w.export_handle())
        r.wait_until_ready(WAIT)
        w.wait_until_ready(WAIT)
        while (method := r.dequeue(WAIT)) != STOP:
            wait = _wait_futex if method == "futex" else _wait_yield
            cpu = _cpu()
            wait(r)
            stamp = r.dequeue(WAIT)
            w.enqueue((time.monotonic_ns() - stamp, _cpu() - cpu), WAIT)
    finally:
        w.close()
        r.close()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {m: {"late": {}, "cpu": []} for m in METHODS}
    w = MessageQueue(1, 1)
    try:
        with Supervisor([Task(_process_b, (w.export_handle(),), "B")]) as b:
            r = MessageQueue.create_from_handle(b.channel("B").recv(WAIT), 0)
            try:
                w.wait_until_ready(WAIT)
                r.wait_until_ready(WAIT)
                for gap in GAPS:
                    for _ in range(args.samples):
                        for m in METHODS:
                            w.enqueue(m, WAIT)
                            time.sleep(gap)  # B waits by method m meanwhile
                            w.enqueue(time.monotonic_ns(), WAIT)
                            late, cpu = r.dequeue(WAIT)
                            out[m]["late"].setdefault(gap, []).append(late / 1e3)
                            out[m]["cpu"].append(cpu)
                w.enqueue(STOP, WAIT)
                raise_for(b.wait(WAIT))
            finally:
                r.close()
    finally:
        w.close()
    return out


def _p90(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=10, method="inclusive")[8]


def main(args: argparse.Namespace) -> int:
    res = measure(args)
    print(f"one-way latency after an idle gap, B waiting as vLLM 0.34's step loop "
          f"({args.samples} messages per gap and method, interleaved)")
    print(f"{'gap ms':>8}" + "".join(f"{f'{m} p50/p90 us':>22}" for m in METHODS)
          + f"{'p50 futex/yield':>17}")
    for gap in GAPS:
        row = f"{gap * 1e3:>8.0f}"
        for m in METHODS:
            xs = res[m]["late"][gap]
            row += f"{f'{statistics.median(xs):.0f} / {_p90(xs):.0f}':>22}"
        f, y = (statistics.median(res[m]["late"][gap]) for m in METHODS)
        print(row + f"{f / y:>17.2f}")
    cf, cy = (sum(res[m]["cpu"]) for m in METHODS)
    print(f"B's CPU over all its waits: futex {cf:.3f} s, yield {cy:.3f} s, "
          f"ratio futex/yield {cf / cy:.3f}")
    return 0
