"""report: the benchmarks people read -- JSON, every figure a ratio.

``make bench`` (``python -m bench report``) measures, in one run:

* **round trip vs payload size, per transport**: one writer process sends a
  ``bytes`` payload of 64 B .. 1 MiB to R reader processes, each answers with a
  small ack on its own channel back, the writer waits for every ack. Transports:
  ``verifiedring`` (the local ring path of MessageQueue), ``verifiedring-remote``
  (the encrypted TCP path over loopback), the ``floor`` ring (:mod:`bench.floor`)
  and ``multiprocessing.Pipe``; vLLM 0.9.0's and 0.33.0's MessageQueue, loaded from
  their wheels by :mod:`bench.anchors`.
* **throughput vs readers**: the writer streams N 1 KiB objects to R = 1..3
  readers; messages per second per reader.
* **large objects** (1 MiB chunks): a 2 MiB object (``bytes`` nested in a tuple)
  round trip, and a 64 MiB one broadcast to 3 readers (GB/s per reader), through the
  ring as a run (``verifiedring-stream``), over the local socket
  (``verifiedring-socket``) and through vLLM's overflow socket.
* **idle wake-up**: :mod:`bench.idle_wakeup` (idle reader CPU; first message after
  an idle gap), futex sleep against the doubling sleep in the same run.

Each round trip and stream figure is the median of ``--repeats`` reps, the reps
of all transports run in an order shuffled by ``random.Random(--seed)``
(:mod:`bench.reps`; seed and repeats are in the JSON); each vLLM anchor runs in its
own worker process, kept for the run. Every latency is also given as a ratio to
the floor ring (and to vLLM when present) measured in the same run; the JSON holds
the machine's description.
Writes ``<out>/bench.json`` (:mod:`bench.plots` draws its PNGs). Default wall time on a 2-core VM:
about 5 min (estimated: a run with small counts, 2 reps and R <= 2, 88 reader
starts, took 95 s, nearly all of it starting readers; the default's 158 starts, its
counts (about 40 s) and the idle bench (under a minute) on top). Measure on an idle
machine: the processes spin.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import anchors
from .channels import LARGE_CHUNK, LARGE_MODES, Channels, run
from .reps import Workers, merge, shuffled

SIZES = (64, 1024, 64 * 1024, 1024 * 1024)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="bench/results", help="directory for bench.json")
    parser.add_argument("--rounds", type=int, default=1500,
                        help="round trips at <= 1 KiB, per rep")
    parser.add_argument("--stream", type=int, default=20_000, help="objects per stream rep")
    parser.add_argument("--repeats", type=int, default=3,
                        help="reps of every round trip and stream, in a shuffled order")
    parser.add_argument("--seed", type=int, default=20, help="the shuffle's seed")
    parser.add_argument("--readers", type=int, default=3, help="most readers")
    parser.add_argument("--no-idle", action="store_true", help="skip the idle wake-up bench")
    parser.add_argument("--only-large", action="store_true",
                        help="only the large-object section (quick)")


def _anchors() -> list[str]:
    """The vLLM anchors that load here (:mod:`bench.anchors`); why the others do not is
    in the JSON's ``vllm`` entry."""
    return [name for name, state in VLLM.items() if state == "loaded"]


VLLM: dict[str, str] = {}
TRANSPORTS = ["verifiedring", "verifiedring-remote", "floor", "pipe"]
WORKERS = Workers(anchors.VERSIONS)


def roundtrip(transport: str, n: int, size: int, rounds: int) -> dict[str, Any]:
    """p50/p90 of ``rounds`` round trips of a ``size``-byte payload to ``n`` readers."""
    payload = os.urandom(size)
    warm = max(rounds // 10, 10)

    def drive(ch: Channels) -> list[float]:
        times = []
        for i in range(warm + rounds):
            t = time.perf_counter()
            ch.send(payload)
            ch.gather()
            if i >= warm:
                times.append(time.perf_counter() - t)
        return times

    times = run(transport, n, [(warm + rounds, 1)], drive)
    qs = statistics.quantiles(times, n=10)
    return {"transport": transport, "readers": n, "size": size,
            "p50_us": statistics.median(times) * 1e6, "p90_us": qs[8] * 1e6}


def large(transport: str, n: int, size: int, rounds: int) -> dict[str, Any]:
    """Round trips of a ``size``-byte ``bytes`` nested in a tuple to ``n`` readers over
    1 MiB chunks: p50, and the bytes each reader received per second."""
    payload = (os.urandom(size),)

    def drive(ch: Channels) -> list[float]:
        times = []
        for i in range(rounds + 2):
            t = time.perf_counter()
            ch.send(payload)
            ch.gather()
            if i >= 2:
                times.append(time.perf_counter() - t)
        return times

    times = run(transport, n, [(rounds + 2, 1)], drive, LARGE_CHUNK)
    p50 = statistics.median(times)
    return {"transport": transport, "readers": n, "size": size, "p50_us": p50 * 1e6,
            "gb_per_s_per_reader": size / p50 / 1e9}


def stream(transport: str, n: int, count: int) -> dict[str, Any]:
    """Messages per second per reader, ``count`` 1 KiB objects streamed to ``n`` readers."""
    payload = os.urandom(1024)

    def drive(ch: Channels) -> float:
        t = time.perf_counter()
        for _ in range(count):
            ch.send(payload)
        ch.gather()  # each reader acks once, after the last
        return time.perf_counter() - t

    seconds = run(transport, n, [(count, count)], drive)
    return {"transport": transport, "readers": n, "msgs_per_s": count / seconds}


def _measure(fn: Callable[..., dict[str, Any]], transport: str, *args: Any) -> dict[str, Any]:
    """``fn(transport, *args)``; for a vLLM anchor in its own worker process (its writer
    too), since both anchors are the package ``vllm``."""
    return WORKERS.run(transport, fn, transport, *args)


def _repeated(
    jobs: list[tuple[Callable[..., dict[str, Any]], str, tuple[Any, ...]]],
    args: argparse.Namespace, keys: tuple[str, ...],
) -> list[dict[str, Any]]:
    """Each job ``(fn, transport, fn_args)`` run ``args.repeats`` times, all reps in the
    order :func:`bench.reps.shuffled` gives for ``args.seed``; one row per job, each of
    ``keys`` the median of its reps."""
    reps: list[list[dict[str, Any]]] = [[] for _ in jobs]
    for i in shuffled(list(range(len(jobs))), args.repeats, args.seed):
        fn, transport, fn_args = jobs[i]
        print(f"{fn.__name__} {transport} {fn_args} ...", flush=True)
        reps[i].append(_measure(fn, transport, *fn_args))
    return [merge(r, keys) for r in reps]


# --- the report ---------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         "")
    except OSError:
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(),
            "kernel": platform.release(), "python": platform.python_version(),
            "load_1min": os.getloadavg()[0]}


def _ratios(rows: list[dict[str, Any]], key: str, base: str) -> None:
    by = {(r["readers"], r.get("size")): r[key] for r in rows if r["transport"] == base}
    for r in rows:
        ref = by.get((r["readers"], r.get("size")))
        if ref:
            r[f"ratio_to_{base}"] = round(r[key] / ref, 3)


def measure_large(args: argparse.Namespace) -> list[dict[str, Any]]:
    larges = []
    large_transports = [*LARGE_MODES, *_anchors()]
    for n, size, rounds in ((1, 2 * 1024 * 1024, args.rounds // 10), (3, 64 * 1024 * 1024, 5)):
        for t in large_transports:
            print(f"large object {t} {size >> 20} MiB x {n} readers ...", flush=True)
            larges.append(_measure(large, t, n, size, max(rounds, 5)))
    for base in ("verifiedring-socket", *_anchors()):
        _ratios(larges, "p50_us", base)
    return larges


def measure_roundtrips(args: argparse.Namespace) -> list[dict[str, Any]]:
    jobs: list[tuple[Callable[..., dict[str, Any]], str, tuple[Any, ...]]] = []
    for size in SIZES:
        rounds = args.rounds if size <= 1024 else max(args.rounds // (size // 1024), 100)
        jobs += [(roundtrip, t, (1, size, rounds)) for t in TRANSPORTS + _anchors()]
    for n in range(2, args.readers + 1):
        jobs += [(roundtrip, t, (n, 1024, args.rounds))
                 for t in ("verifiedring", "floor", *_anchors())]
    rows = _repeated(jobs, args, ("p50_us", "p90_us"))
    for base in ("floor", *_anchors()):
        _ratios(rows, "p50_us", base)
    return rows


def measure_streams(args: argparse.Namespace) -> list[dict[str, Any]]:
    jobs: list[tuple[Callable[..., dict[str, Any]], str, tuple[Any, ...]]] = [
        (stream, t, (n, args.stream))
        for n in range(1, args.readers + 1) for t in ("verifiedring", "floor", "pipe", *_anchors())
    ]
    streams = _repeated(jobs, args, ("msgs_per_s",))
    for base in ("floor", *_anchors()):
        _ratios(streams, "msgs_per_s", base)
    return streams


def measure(args: argparse.Namespace) -> dict[str, Any]:
    VLLM.update(anchors.status())
    report: dict[str, Any] = {"machine": machine(), "vllm": dict(VLLM), "seed": args.seed,
                              "repeats": args.repeats}
    report["roundtrip"], report["stream"] = [], []
    if args.only_large:
        report["large"] = measure_large(args)
        return report
    report["roundtrip"] = measure_roundtrips(args)
    report["stream"] = measure_streams(args)
    report["large"] = measure_large(args)
    if not args.no_idle:
        from . import idle_wakeup

        idle_args = argparse.Namespace(full=False, idle=None, rounds=2000, repeats=2)
        report["idle"] = idle_wakeup.measure(idle_args)
    return report


def main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with WORKERS:
        report = measure(args)
    (out / "bench.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out / 'bench.json'}")
    for r in report["roundtrip"]:
        ratio = r.get("ratio_to_floor")
        print(f"  round trip {r['transport']:20s} R={r['readers']} {r['size']:>8d} B  "
              f"p50 {r['p50_us']:9.1f} us  p90 {r['p90_us']:9.1f} us  x floor {ratio}")
    for r in report["stream"]:
        print(f"  stream {r['transport']:20s} R={r['readers']}  {r['msgs_per_s']:10.0f} msg/s  "
              f"x floor {r.get('ratio_to_floor')}")
    for r in report["large"]:
        print(f"  large {r['transport']:20s} R={r['readers']} {r['size'] >> 20:>3d} MiB  "
              f"p50 {r['p50_us']:9.0f} us  {r['gb_per_s_per_reader']:5.2f} GB/s/reader  "
              f"x vllm-0.9.0 {r.get('ratio_to_vllm-0.9.0')}")
    return 0
