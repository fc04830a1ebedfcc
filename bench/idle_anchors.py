"""idle_anchors: the first message after idle and the idle reader's CPU, beside vLLM and C.

For each queue of ``--queues`` (``verifiedring`` and the vLLM anchors of
:mod:`bench.anchors`; an anchor that does not load is skipped, and ``skipped`` says
why), one writer process and ``READERS`` local reader processes, built as
:mod:`bench.channels` builds them (``Channels`` / ``_queue_ends``: a forward queue,
and an ack queue back from each reader). After each idle gap the writer enqueues a
small tuple carrying ``time.monotonic_ns()``; each reader, blocked in ``dequeue``,
subtracts it on return (one clock for all) and acks. The gaps of one repeat are in
shuffled order, and each repeat runs the queues and the C floor once each, in a
shuffled order, one at a time (only one queue's processes alive at once, so no
queue's idle readers load the cores under another's).

In the last repeat, after the last message each reader stays in ``dequeue`` (with a
long timeout) while a thread of its own measures the process's CPU (``getrusage``
``RUSAGE_SELF``, all threads) over ``--idle-window`` seconds that begin
``--idle-after`` seconds after that message.

The C floor (``bench/futex_floor.c``) is built with ``cc -O2`` into the bench cache
(:func:`bench.anchors.cache_dir`) at the first run: ``READERS`` processes waiting in
``FUTEX_WAIT`` on a shared word, another storing it after each gap and calling
``FUTEX_WAKE`` for all of them (as many waiters as the queues have readers). Without a
compiler ``skipped`` says so.

Writes ``<out>/idle.json``::

    {"machine": {...},               # bench.report.machine()
     "readers": 2, "repeats": 3, "gaps_s": [0.01, 0.1, 1.0, 3.0],
     "idle_window_s": [after, after + window],   # seconds after the last message
     "queues": {"verifiedring": {
         "first_message_us": {"0.01": {"p50": .., "p90": .., "samples": n}, ...},
         "idle_cpu_percent": ..,                  # mean over the readers, % of one core
         "idle_cpu_percent_per_reader": [.., ..]}, "vllm-0.9.0": {...}, ...},
     "c_futex_floor_us": {"0.01": {"p50": .., "p90": .., "samples": n}, ...},
     "ratios": {"verifiedring/c-futex": {"0.01": p50 ratio, ...},
                "verifiedring/vllm-0.9.0": {"0.01": .., ..., "idle_cpu": ..}, ...},
     "skipped": {"vllm-0.33.0": "not loaded: ...", "c-futex": "not built: ..."}}

Keys of gaps are the gap in seconds as ``f"{gap:g}"``; samples pool every reader's.
The default run takes about four minutes on 2 cores (``make bench`` runs it after
the report); ``--quick`` (gaps up to 1 s, a 2 s window after 1 s) under a minute.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import random
import resource
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from verifiedring.testing.launcher import Supervisor, Task, channel, raise_for, run_tasks

from . import anchors
from .channels import Channels, _queue_ends
from .idle_wakeup import _p
from .report import machine

QUEUES = ("verifiedring", *anchors.VERSIONS)
C_FLOOR = "c-futex"
FLOOR_SOURCE = Path(__file__).with_name("futex_floor.c")
READERS = 2
CHUNK = 4096  # bytes per chunk: the messages are small
WAIT = 60.0  # seconds: the most a start, a hand-off or a compile may take
WARM_UPS = 3  # messages before the first sample
WARM, SAMPLE, IDLE, STOP = range(4)
#: (gap in seconds, samples per repeat)
GAPS = ((0.01, 20), (0.1, 10), (1.0, 4), (3.0, 2))
QUICK_GAPS = ((0.01, 5), (0.1, 3), (1.0, 1))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="bench/results", help="directory for idle.json")
    parser.add_argument("--queues", nargs="+", choices=QUEUES, default=list(QUEUES),
                        help="the queues measured (the C floor always runs)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats (default 3, quick 2)")
    parser.add_argument("--idle-after", type=float, default=None,
                        help="seconds from the last message to the CPU window (default 10)")
    parser.add_argument("--idle-window", type=float, default=None,
                        help="seconds of reader CPU measured (default 10)")
    parser.add_argument("--quick", action="store_true", help="gaps up to 1 s, a 2 s window")
    parser.add_argument("--seed", type=int, default=0, help="of the shuffled orders")


def _idle(args: argparse.Namespace) -> tuple[float, float]:
    """(seconds after the last message, seconds measured)."""
    after = args.idle_after if args.idle_after is not None else (1.0 if args.quick else 10.0)
    window = args.idle_window if args.idle_window is not None else (2.0 if args.quick else 10.0)
    return after, window


# --- the C floor --------------------------------------------------------------------


def build_floor(cache: Path | None = None) -> tuple[Path | None, str]:
    """The C floor's executable in the cache (compiled once per source version), and
    ``built``; or None and why not."""
    cc = shutil.which("cc")
    if cc is None:
        return None, "not built: no C compiler (cc) on PATH"
    digest = hashlib.sha256(FLOOR_SOURCE.read_bytes()).hexdigest()[:16]
    exe = (cache or anchors.cache_dir()) / "futex_floor" / f"futex_floor-{digest}"
    if not exe.exists():
        exe.parent.mkdir(parents=True, exist_ok=True)
        tmp = exe.with_name(f"{exe.name}.{os.getpid()}.tmp")
        try:
            subprocess.run([cc, "-O2", "-o", str(tmp), str(FLOOR_SOURCE)], check=True,
                           capture_output=True, text=True, timeout=WAIT)
        except subprocess.CalledProcessError as e:
            return None, "not built: cc failed: " + (e.stderr.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            return None, "not built: cc timed out"
        os.replace(tmp, exe)
    return exe, "built"


def run_floor(exe: Path, gaps: list[float], waiters: int = 1) -> list[tuple[float, float]]:
    """(gap, one-way us) for each of ``gaps`` and each of ``waiters`` woken at once
    (waiter 0 first), in order, from the C floor."""
    done = subprocess.run([str(exe), "-w", str(waiters), *map(repr, gaps)], check=True,
                          capture_output=True, text=True, timeout=sum(gaps) + WAIT)
    late = json.loads(done.stdout)["one_way_ns"]
    each = [g for g in gaps for _ in range(waiters)]
    return [(g, ns / 1e3) for g, ns in zip(each, late, strict=True)]


# --- one queue: a writer process and its readers -------------------------------------


def _watch(r: int, after: float, window: float, out: list[float]) -> None:
    """In reader ``r``: its process's CPU (% of one core) over ``window`` seconds from
    ``after`` seconds on; then tells the writer."""
    time.sleep(after)
    ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    time.sleep(window)
    ru1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    out.append(cpu / (t1 - t0) * 100)
    channel().send(("idle", r))


def _reader(queue: str, ends: Any, r: int, idle: tuple[float, float]) -> dict[str, Any]:
    """Reader ``r``: the one-way us of each sample by gap; the idle CPU, if measured."""
    recv, ack, close = _queue_ends(queue, ends, r)
    late: dict[float, list[float]] = {}
    cpu: list[float] = []
    watch: threading.Thread | None = None
    try:
        while True:
            timeout = WAIT if watch is None else sum(idle) + WAIT
            kind, gap, stamp = recv(timeout=timeout)
            took = (time.monotonic_ns() - stamp) / 1e3
            if kind == STOP:
                break
            if kind == SAMPLE:
                late.setdefault(gap, []).append(took)
            elif kind == IDLE:
                watch = threading.Thread(target=_watch, args=(r, *idle, cpu), daemon=True)
                watch.start()
            ack()
    finally:
        close()
    if watch is not None:
        watch.join(WAIT)
    return {"late": late, "idle_cpu": cpu[0] if cpu else None}


def _message(ch: Channels, kind: int, gap: float) -> None:
    ch.send((kind, gap, time.monotonic_ns()))
    if kind != STOP:
        ch.gather()


def _writer(queue: str, gaps: list[float], idle: tuple[float, float] | None) -> list[Any]:
    """Runs one queue: warm-up, a message after each of ``gaps``, then (if ``idle``) the
    idle window; each reader's result."""
    ch = Channels(queue, READERS, mp.get_context("spawn"), CHUNK)
    tasks = [Task(_reader, (queue, ch.child_args[r], r, idle or (0.0, 0.0)),
                  name=f"{queue} reader {r}") for r in range(READERS)]
    try:
        with Supervisor(tasks) as readers:
            ch.connect()
            for _ in range(WARM_UPS):
                _message(ch, WARM, 0.0)
            for gap in gaps:
                time.sleep(gap)
                _message(ch, SAMPLE, gap)
            if idle is not None:
                _message(ch, IDLE, 0.0)
                for t in tasks:
                    readers.channel(t.name).recv(sum(idle) + WAIT)
            _message(ch, STOP, 0.0)
            return raise_for(readers.wait(WAIT), f"{queue} readers")
    finally:
        ch.close()


# --- the run --------------------------------------------------------------------------


def _summary(xs: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(xs), 2), "p90": round(_p(xs, 9), 2),
            "samples": len(xs)}


def _ratios(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """verifiedring's p50 per gap over the C floor's and each vLLM's; idle CPU too."""
    ours = report["queues"].get("verifiedring")
    if ours is None:
        return {}
    bases = {name: q["first_message_us"] for name, q in report["queues"].items()}
    bases.pop("verifiedring")
    if "c_futex_floor_us" in report:
        bases[C_FLOOR] = report["c_futex_floor_us"]
    out = {}
    for name, base in bases.items():
        ratio = {g: round(s["p50"] / base[g]["p50"], 3)
                 for g, s in ours["first_message_us"].items() if g in base}
        theirs = report["queues"].get(name, {}).get("idle_cpu_percent")
        if theirs:
            ratio["idle_cpu"] = round(ours["idle_cpu_percent"] / theirs, 4)
        out[f"verifiedring/{name}"] = ratio
    return out


def _run_all(runs: list[str], args: argparse.Namespace, exe: Path | None,
             rng: random.Random) -> tuple[dict[str, dict[float, list[float]]],
                                          dict[str, list[float]]]:
    """Every repeat: each of ``runs`` once, in a shuffled order; the one-way us by run
    and gap, and (from the last repeat) each queue's readers' idle CPU."""
    gaps = QUICK_GAPS if args.quick else GAPS
    repeats = _repeats(args)
    idle = _idle(args)
    late: dict[str, dict[float, list[float]]] = {name: {} for name in runs}
    cpu: dict[str, list[float]] = {}
    for rep in range(repeats):
        rng.shuffle(runs)
        for name in runs:
            plan = [g for g, n in gaps for _ in range(n)]
            rng.shuffle(plan)
            print(f"repeat {rep + 1}/{repeats}: {name} ...", flush=True)
            if exe is not None and name == C_FLOOR:
                for g, us in run_floor(exe, plan, READERS):
                    late[name].setdefault(g, []).append(us)
                continue
            window = idle if rep == repeats - 1 else None
            limit = sum(plan) + sum(window or ()) + 4 * WAIT
            [res] = run_tasks([Task(_writer, (name, plan, window), name=f"{name} writer")],
                              timeout=limit)
            for reader in res:
                for g, xs in reader["late"].items():
                    late[name].setdefault(g, []).extend(xs)
                if reader["idle_cpu"] is not None:
                    cpu.setdefault(name, []).append(reader["idle_cpu"])
    return late, cpu


def _repeats(args: argparse.Namespace) -> int:
    return int(args.repeats or (2 if args.quick else 3))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole run: the report of the module docstring."""
    wanted = [q for q in QUEUES if q in args.queues]
    states = anchors.status(names=[q for q in wanted if q in anchors.VERSIONS])
    skipped = {q: s for q, s in states.items() if s != "loaded"}
    exe, built = build_floor()
    if exe is None:
        skipped[C_FLOOR] = built
    runs = [q for q in wanted if q not in skipped] + ([C_FLOOR] if exe else [])
    late, cpu = _run_all(runs, args, exe, random.Random(args.seed))
    by_gap = {name: {f"{g:g}": _summary(xs) for g, xs in sorted(got.items())}
              for name, got in late.items()}
    idle = _idle(args)
    report: dict[str, Any] = {
        "machine": machine(), "readers": READERS, "repeats": _repeats(args),
        "gaps_s": [g for g, _ in (QUICK_GAPS if args.quick else GAPS)],
        "idle_window_s": [idle[0], sum(idle)],
        "queues": {name: {"first_message_us": by_gap[name],
                          "idle_cpu_percent": statistics.mean(cpu[name]),
                          "idle_cpu_percent_per_reader": cpu[name]}
                   for name in QUEUES if name in cpu},
        "skipped": skipped,
    }
    if C_FLOOR in by_gap:
        report["c_futex_floor_us"] = by_gap[C_FLOOR]
    report["ratios"] = _ratios(report)
    return report


def _cells(us: dict[str, dict[str, float]], keys: list[str]) -> str:
    """The p50 / p90 columns, ``-`` for a gap without samples."""
    texts = [f"{us[k]['p50']:.0f} / {us[k]['p90']:.0f}" if k in us else "-" for k in keys]
    return "".join(f"{t:>18}" for t in texts)


def main(args: argparse.Namespace) -> int:
    report = measure(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "idle.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    keys = [f"{g:g}" for g in report["gaps_s"]]
    print(f"first message after idle, one-way p50 / p90 us, R={READERS}; idle reader CPU "
          f"% of a core, {report['idle_window_s'][0]:g}-{report['idle_window_s'][1]:g} s "
          f"after the last message")
    print(f"{'queue':<14}" + "".join(f"{f'gap {k} s':>18}" for k in keys) + f"{'idle CPU %':>12}")
    rows = {name: (q["first_message_us"], f"{q['idle_cpu_percent']:>12.4f}")
            for name, q in report["queues"].items()}
    if "c_futex_floor_us" in report:
        rows[C_FLOOR] = (report["c_futex_floor_us"], "")
    for name, (us, idle_cpu) in rows.items():
        print(f"{name:<14}{_cells(us, keys)}{idle_cpu}")
    for name, why in report["skipped"].items():
        print(f"{name:<14}{why}")
    for name, ratio in report["ratios"].items():
        print(f"  {name}: " + ", ".join(f"{k} {v:g}" for k, v in ratio.items()))
    print("targets: verifiedring <= 3x the C futex wake of as many waiters per gap; idle CPU "
          "<= 0.01 % of a core")
    print(f"wrote {out / 'idle.json'}")
    return 0
