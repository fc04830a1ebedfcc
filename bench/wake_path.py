"""wake_path: where the microseconds of a first message after idle go, per step.

One writer (this process) and one local reader (a spawned process) on a
``MessageQueue(1, 1)``. Per gap (``--gaps``, seconds of idle before each message),
``--messages`` messages, each an int stamped with ``time.monotonic_ns()`` right
before ``enqueue`` (one clock for both processes). Four stamps split the one-way
time into its steps:

* ``writer``: from the ``enqueue`` call to the writer's ``futex_wake`` call (pickle,
  claim, copy, flag stores, publish, the sleep-word check);
* ``kernel``: from that ``futex_wake`` call to the reader's return from its futex wait
  (the wake syscall, the scheduler, the reader's GIL);
* ``reader``: from that return to ``dequeue``'s return (end of sleep, poll, take,
  unpickle, release);
* ``one-way``: the whole, and each step as a share of it.

The stamps wrap the module's ``futex_wait`` and
``futex_wake`` (about a microsecond each). Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from verifiedring import MessageQueue
from verifiedring import cursors as cursors_module
from verifiedring.testing.launcher import Supervisor, Task, channel, raise_for
from verifiedring.waiting import futex_wait, futex_wake

WAIT = 30.0  # seconds: the most one message may take
STEPS = ("writer", "kernel", "reader", "one-way")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=40, help="messages per gap")
    parser.add_argument(
        "--gaps", type=float, nargs="+", default=[0.01, 0.1, 1.0],
        help="idle seconds before each message",
    )


def _reader(handle: Any, count: int) -> None:
    """Dequeue ``count`` stamps; send back (sent, woke, returned) for each."""
    r = MessageQueue.create_from_handle(handle, 0)
    r.wait_until_ready(WAIT)
    woke = [0]

    def stamped(address: int, expected: int, timeout: float) -> None:
        futex_wait(address, expected, timeout)
        woke[0] = time.monotonic_ns()

    setattr(cursors_module, "futex_wait", stamped)  # noqa: B010 (the module's own name)
    rows = []
    for _ in range(count):
        woke[0] = 0
        sent = r.dequeue(WAIT)
        rows.append((sent, woke[0], time.monotonic_ns()))
    channel().send(rows)
    r.close()


def _median_us(values: list[int]) -> float | None:
    return round(statistics.median(values) / 1e3, 1) if values else None


def measure(gap: float, count: int) -> dict[str, Any]:
    """The median of each step at one idle ``gap`` (seconds), and how many messages
    found the reader asleep."""
    w = MessageQueue(1, 1)
    wakes: list[int] = []

    def stamped(address: int) -> int:
        wakes.append(time.monotonic_ns())
        return futex_wake(address)

    try:
        with Supervisor([Task(_reader, (w.export_handle(), count), name="reader")]) as run:
            w.wait_until_ready(WAIT)
            setattr(cursors_module, "futex_wake", stamped)  # noqa: B010
            spans = []
            for _ in range(count):
                if gap:
                    time.sleep(gap)
                before = len(wakes)
                t0 = time.monotonic_ns()
                w.enqueue(t0, WAIT)
                spans.append(wakes[before] if len(wakes) > before else 0)
            rows = run.channel("reader").recv(WAIT)
            raise_for(run.wait(WAIT))
    finally:
        setattr(cursors_module, "futex_wake", futex_wake)  # noqa: B010
        w.close()
    steps: dict[str, list[int]] = {s: [] for s in STEPS}
    for (sent, woke, returned), wake in zip(rows, spans, strict=True):
        steps["one-way"].append(returned - sent)
        if woke and wake:
            steps["writer"].append(wake - sent)
            steps["kernel"].append(woke - wake)
            steps["reader"].append(returned - woke)
    medians = {s: _median_us(v) for s, v in steps.items()}
    total = medians["one-way"]
    shares = {
        s: round(m / total, 2) for s, m in medians.items()
        if s != "one-way" and m is not None and total
    }
    return {"gap_s": gap, "asleep": len(steps["kernel"]), "messages": count,
            "p50_us": medians, "share_of_one_way": shares}


def main(args: argparse.Namespace) -> int:
    print(f"{'gap':>7} {'asleep':>7} " + " ".join(f"{s:>9}" for s in STEPS) + "   shares")
    for gap in args.gaps:
        r = measure(gap, args.messages)
        cells = " ".join(f"{r['p50_us'][s] if r['p50_us'][s] is not None else '-':>9}"
                         for s in STEPS)
        print(f"{gap:>6}s {r['asleep']:>3}/{r['messages']:<3} {cells}   {r['share_of_one_way']}")
    return 0
