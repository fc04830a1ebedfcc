"""idle_wakeup: idle reader CPU and first-message latency after an idle gap, futex vs doubling.

Two processes and, per method, two rings (A -> B and B -> A). Methods, in the same
run and interleaved sample by sample:

* ``futex`` (this library): after a 1 ms spin the reader blocks on its sleep word
  and the writer wakes it after publishing (``spec/sleep/ReaderSleep.tla``);
* ``doubling`` (the baseline, the library before): readers made with
  ``wake_on_publish=False`` sleep, doubling from 20 us to 1 ms; the writers'
  ``wake_sleepers`` is disabled, so the busy path is the old one exactly.

Figures: the reader's CPU (``getrusage`` in B, % of one core) over ``--idle``
seconds that begin one second after its last message; the one-way latency of the
first message after idle gaps (A stamps ``time.monotonic_ns()`` right before it
publishes, B subtracts: one clock for both), p50 and p90; and the busy 1 KiB round
trip. The default run takes under a minute; ``--full`` adds the 3 s gap and more
samples.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import struct
import time
from typing import Any

from verifiedring import RingHandle, ShmRingBuffer
from verifiedring.testing.launcher import Supervisor, Task, raise_for

PAYLOAD = 1024
WAIT = 30.0  # seconds: the most any single hand-off may take
METHODS = ("futex", "doubling")
MSG = struct.Struct("<Bq")  # kind, A's time.monotonic_ns() when it published
REPLY = struct.Struct("<qdd")  # latency ns; cpu seconds, wall seconds (idle)
LATENCY, IDLE_START, IDLE_TICK, IDLE_END, PING = range(5)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--full", action="store_true", help="gaps up to 3 s, more samples")
    parser.add_argument("--idle", type=float, default=None, help="idle seconds measured")
    parser.add_argument("--rounds", type=int, default=10000, help="round trips per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats per method")


def _gaps(args: argparse.Namespace) -> list[tuple[float, int]]:
    """(idle gap in seconds, samples per method)."""
    if args.full:
        return [(0.01, 50), (0.1, 50), (1.0, 20), (3.0, 10)]
    return [(0.01, 20), (0.1, 20), (1.0, 5)]


def _cursors(rings: tuple[ShmRingBuffer, ...], method: str, side: str) -> tuple[Any, Any]:
    """Side ``a`` writes ring 0 and reads ring 1; side ``b`` the other way round."""
    out_ring, in_ring = rings if side == "a" else rings[::-1]
    w = out_ring.writer()
    r = in_ring.reader(0, log_interval=3600.0, wake_on_publish=method == "futex")
    if method == "doubling":
        # the old busy path: no check after publish
        w.wake_sleepers = lambda chunk: None  # type: ignore[method-assign]
    return w, r


def _process_b(handles: dict[str, tuple[RingHandle, RingHandle]], plan: list[Any]) -> None:
    rings = {m: tuple(ShmRingBuffer.attach(h) for h in handles[m]) for m in METHODS}
    try:
        cur = {m: _cursors(rings[m], m, "b") for m in METHODS}
        for step, method, n in plan:
            w, r = cur[method]
            if step == "rtt":
                for _ in range(n):
                    with r.acquire_read(WAIT) as buf:
                        data = bytes(buf[:PAYLOAD])
                    with w.acquire_write(WAIT) as buf:
                        buf[:8] = data[:8]
                continue
            for _ in range(n):
                with r.acquire_read(WAIT) as buf:
                    kind, stamp = MSG.unpack_from(buf)
                    late = time.monotonic_ns() - stamp
                if kind == IDLE_TICK:
                    ru, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
                cpu = wall = 0.0
                if kind == IDLE_END:
                    ru2, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
                    cpu = ru2.ru_utime + ru2.ru_stime - ru.ru_utime - ru.ru_stime
                with w.acquire_write(WAIT) as buf:
                    REPLY.pack_into(buf, 0, late, cpu, wall)
    finally:
        for pair in rings.values():
            for ring in pair:
                ring.close()


def _send(cur: tuple[Any, Any], kind: int) -> tuple[int, float, float]:
    w, r = cur
    with w.acquire_write(WAIT) as buf:
        MSG.pack_into(buf, 0, kind, time.monotonic_ns())
    with r.acquire_read(WAIT) as buf:
        return REPLY.unpack_from(buf)


def _plan(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """What B does, in A's order: (step, method, messages or round trips)."""
    plan = [("msg", m, 1) for m in METHODS]  # the warm-up
    for _gap, samples in _gaps(args):
        plan += [("msg", m, 1) for _ in range(samples) for m in METHODS]
    plan += [("msg", m, 3) for m in METHODS]  # idle start, tick, end
    for _ in range(args.repeats):
        plan += [("rtt", m, args.rounds) for m in METHODS]
    return plan


def _first_message_late(cur: dict[str, Any], args: argparse.Namespace,
                        out: dict[str, Any]) -> None:
    """How late the first message after each idle gap arrives, per method (ms)."""
    for gap, samples in _gaps(args):
        for _ in range(samples):
            for m in METHODS:
                time.sleep(gap)
                late = _send(cur[m], LATENCY)[0]
                out[m]["late"].setdefault(gap, []).append(late / 1e3)


def _idle_cpu(cur: dict[str, Any], idle: float, out: dict[str, Any]) -> None:
    """The idle reader's CPU, in % of one core, per method."""
    for m in METHODS:
        _send(cur[m], IDLE_START)
        time.sleep(1.0)  # "once idle for a second"
        _send(cur[m], IDLE_TICK)
        time.sleep(idle)
        _, cpu, wall = _send(cur[m], IDLE_END)
        out[m]["cpu"] = cpu / wall * 100


def _round_trips(cur: dict[str, Any], args: argparse.Namespace, out: dict[str, Any]) -> None:
    """1 KiB round trips (us each), ``args.repeats`` times per method."""
    payload = bytes(range(256)) * (PAYLOAD // 256)
    for _ in range(args.repeats):
        for m in METHODS:
            w, r = cur[m]
            start = time.perf_counter()
            for _ in range(args.rounds):
                with w.acquire_write(WAIT) as buf:
                    buf[:PAYLOAD] = payload
                with r.acquire_read(WAIT) as buf:
                    bytes(buf[:8])
            out[m]["rtt"].append((time.perf_counter() - start) / args.rounds * 1e6)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    idle = args.idle if args.idle is not None else (20.0 if args.full else 10.0)
    plan = _plan(args)
    out: dict[str, Any] = {m: {"late": {}, "rtt": []} for m in METHODS}
    rings = {
        m: (ShmRingBuffer(1, PAYLOAD, 2), ShmRingBuffer(1, PAYLOAD, 2)) for m in METHODS
    }
    try:
        handles = {m: (rings[m][0].handle(), rings[m][1].handle()) for m in METHODS}
        cur = {m: _cursors(rings[m], m, "a") for m in METHODS}
        with Supervisor([Task(_process_b, (handles, plan), "B")]) as b:
            for m in METHODS:
                _send(cur[m], LATENCY)  # warm up: both sides running
            _first_message_late(cur, args, out)
            _idle_cpu(cur, idle, out)
            _round_trips(cur, args, out)
            raise_for(b.wait(WAIT))
    finally:
        for pair in rings.values():
            for ring in pair:
                ring.close()
    out["idle"] = idle
    return out


def _p(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=10, method="inclusive")[q - 1] if len(xs) > 1 else xs[0]


def main(args: argparse.Namespace) -> int:
    res = measure(args)
    gaps = [g for g, _ in _gaps(args)]
    print(f"idle reader and first message after an idle gap (1 reader; "
          f"{res['idle']:.0f} s idle; {args.repeats} x {args.rounds} round trips)")
    head = f"{'method':<10}{'idle CPU %':>11}"
    head += "".join(f"{f'gap {g * 1e3:.0f} ms p50/p90 us':>24}" for g in gaps)
    print(head + f"{'1 KiB rtt us':>14}")
    for m in METHODS:
        row = f"{m:<10}{res[m]['cpu']:>11.3f}"
        for g in gaps:
            xs = res[m]["late"][g]
            row += f"{f'{statistics.median(xs):.0f} / {_p(xs, 9):.0f}':>24}"
        print(row + f"{statistics.median(res[m]['rtt']):>14.2f}")
    f, d = res["futex"], res["doubling"]
    ratio = statistics.median(f["rtt"]) / statistics.median(d["rtt"])
    print(f"busy round trip futex / doubling: {ratio:.3f}   (target <= 1.0 within noise)")
    print("targets: idle CPU <= 0.1 %; first message p50 <= 100 us, p90 <= 200 us")
    return 0
