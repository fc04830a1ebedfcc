"""cadence: an engine's rhythm -- one writer, R local readers, a 1 KiB step every T.

An engine's queue neither streams nor idles for seconds: it carries one step every few
milliseconds, and between steps its readers wait. Per cell (T, R) of :data:`CELLS`
(10 ms and 2 ms, R = 1 and 2) and per side, one writer process enqueues
``(stamp, 1 KiB bytes)`` every T (on an absolute schedule: the n-th message is due at
start + n T) for ``--seconds``; each of the R reader processes, waiting in ``dequeue``,
subtracts the stamp (``time.monotonic_ns()``, one clock for all) on return. Each
reader's and the writer's CPU (``getrusage`` ``RUSAGE_SELF``, all threads) is measured
from the first timed message to the last, as a share of one core.

Sides: ``verifiedring`` (and, when named, the same with a lever of ``pace.Pace`` off
in its readers: :data:`LEVERS`) and the vLLM anchors that load (:mod:`bench.anchors`: 0.9.0,
and 0.33.0, whose ``shm_broadcast.py`` is 0.34's), built as :mod:`bench.channels`
builds them; ``iceoryx2`` (its Python publish-subscribe, the pickled object in a
``Slice[c_uint8]`` sample, and an event service the publisher notifies after each
send, on which the subscribers block: they sleep at once and never spin), installed
with ``pip install --target`` into the bench cache at the first run (``skipped`` says
why not, when it cannot be); and the C floor (``bench/futex_floor.c``, as
:mod:`bench.idle_anchors` builds it): R waiters woken by one ``FUTEX_WAKE`` after a gap
of T, the same number of waiters as readers.

Each cell runs every side ``--repeats`` times, all cells' runs in one order shuffled by
``random.Random(--seed)`` (:func:`bench.reps.shuffled`), one run at a time; each figure
is the median over the reps of that rep's p50 / p99 (every reader's samples pooled)
and CPU. Writes ``<out>/cadence.json``::

    {"machine": {...}, "payload_bytes": 1024, "seconds": s, "repeats": k, "seed": n,
     "cells": {"10 ms, R=1": {"period_s": 0.01, "readers": 1,
        "sides": {"verifiedring": {"p50_us": .., "p99_us": .., "samples": n,
                                   "reader_cpu_percent": .., "writer_cpu_percent": ..,
                                   "reps_p50_us": [..], ...},
                  "vllm-0.9.0": {...}, "iceoryx2": {...},
                  "c-futex": {"p50_us": .., "p99_us": .., "samples": n}}}, ...},
     "skipped": {"iceoryx2": "not installed: ...", ...}}

Each run also spends a few seconds starting its processes: ``--quick`` (1 s per run, 1
rep, 20 runs) took a minute and a half on 2 cores under load; the default (2 s per
run, 2 reps, 40 runs) about twice and a half that.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import json
import multiprocessing as mp
import os
import pickle
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from verifiedring.testing.launcher import Supervisor, Task, channel, raise_for, run_tasks

from . import anchors
from .channels import Channels, _queue_ends
from .idle_anchors import C_FLOOR, build_floor, run_floor
from .report import machine
from .reps import merge, shuffled

ICEORYX = "iceoryx2"
#: where iceoryx2 (as the rings) keeps its segments
SHM = Path("/dev/shm")
#: verifiedring with a lever of issue 31 off, in its processes (not run unless asked:
#: ``--sides``): the 1 ms spin before every block and no rhythm (the code before
#: ``pace.Pace``), the pace's spin but no rhythm window, or the Python steps only (no
#: native step core).
LEVERS = {"verifiedring-fixed-spin": ("spin", "window"), "verifiedring-no-rhythm": ("window",),
          "verifiedring-python-steps": ("native",)}
QUEUES = ("verifiedring", *anchors.VERSIONS)
SIDES = (*QUEUES, ICEORYX, C_FLOOR)
#: (period in seconds, readers)
CELLS = ((0.01, 1), (0.01, 2), (0.002, 1), (0.002, 2))
PAYLOAD = 1024
CHUNK = 4096  # bytes per chunk: one step fits one
WAIT = 60.0  # seconds: the most a start or a hand-off may take
WARM_UPS = 20  # acknowledged messages before the timed ones
WARM, SAMPLE, STOP = range(3)
KEYS = ("p50_us", "p99_us", "reader_cpu_percent", "writer_cpu_percent")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="bench/results", help="directory for cadence.json")
    parser.add_argument("--sides", nargs="+", choices=[*SIDES, *LEVERS], default=list(SIDES),
                        help="the sides measured (the levers' only when named)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds of steps per run (default 2, quick 1)")
    parser.add_argument("--repeats", type=int, default=None, help="reps (default 2, quick 1)")
    parser.add_argument("--quick", action="store_true", help="1 s per run, 1 rep")
    parser.add_argument("--seed", type=int, default=31, help="of the shuffled order")


def cell_name(period: float, readers: int) -> str:
    """``10 ms, R=1``."""
    return f"{period * 1000:g} ms, R={readers}"


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class _Meter:
    """A process's CPU between :meth:`start` and :meth:`stop`, as % of one core."""

    def __init__(self) -> None:
        self.cpu0 = self.t0 = 0.0
        self.percent: float | None = None

    def start(self) -> None:
        self.cpu0, self.t0 = _cpu(), time.monotonic()

    def stop(self) -> None:
        self.percent = (_cpu() - self.cpu0) / (time.monotonic() - self.t0) * 100


def _schedule(period: float, seconds: float, send: Any) -> float:
    """``send(SAMPLE)`` every ``period`` for ``seconds`` (absolute schedule); the
    caller's CPU over it, % of one core."""
    meter = _Meter()
    meter.start()
    due = time.monotonic()
    for _ in range(max(int(seconds / period), 1)):
        due += period
        left = due - time.monotonic()
        if left > 0:
            time.sleep(left)
        send(SAMPLE)
    meter.stop()
    assert meter.percent is not None
    return meter.percent


def _step(kind: int) -> tuple[int, int, bytes]:
    return kind, time.monotonic_ns(), PAYLOAD_BYTES


PAYLOAD_BYTES = bytes(range(256)) * (PAYLOAD // 256)


def _take(msg: tuple[int, int, bytes], late: list[float], meter: _Meter) -> int:
    """One step taken by a reader: its kind; a SAMPLE's one-way us into ``late`` (the
    first starts the CPU meter)."""
    took = (time.monotonic_ns() - msg[1]) / 1e3
    kind = msg[0]
    if kind == SAMPLE:
        if not late:
            meter.start()
        late.append(took)
        if len(msg[2]) != PAYLOAD:
            raise ValueError(f"pid {os.getpid()}: a step of {len(msg[2])} bytes, expected "
                             f"{PAYLOAD}")
    elif kind == STOP:
        meter.stop()
    return kind


# --- the queues: verifiedring and vLLM --------------------------------------------------


def _lever_off(side: str) -> None:
    """In a process of a lever's side: that lever of :class:`pace.Pace` off, or the
    native step core (:mod:`verifiedring.native`)."""
    from verifiedring import native
    from verifiedring.pace import Pace

    off = LEVERS.get(side, ())
    if "native" in off:
        native.ENABLED = False
    if "spin" in off:
        setattr(Pace, "spin", lambda self: self.longest)  # noqa: B010 (a method replaced)
    if "window" in off:
        setattr(Pace, "window", lambda self, *when: None)  # noqa: B010


def _queue_reader(side: str, ends: Any, r: int) -> dict[str, Any]:
    _lever_off(side)
    recv, ack, close = _queue_ends(side, ends, r)
    late: list[float] = []
    meter = _Meter()
    try:
        while True:
            kind = _take(recv(timeout=WAIT), late, meter)
            if kind == STOP:
                break
            if kind == WARM:
                ack()
    finally:
        close()
    return {"late": late, "cpu": meter.percent}


def _queue_writer(side: str, period: float, readers: int, seconds: float) -> dict[str, Any]:
    _lever_off(side)
    ch = Channels(side, readers, mp.get_context("spawn"), CHUNK)
    tasks = [Task(_queue_reader, (side, ch.child_args[r], r), name=f"{side} reader {r}")
             for r in range(readers)]
    try:
        with Supervisor(tasks) as procs:
            ch.connect()
            for _ in range(WARM_UPS):
                ch.send(_step(WARM))
                ch.gather()
            cpu = _schedule(period, seconds, lambda kind: ch.send(_step(kind)))
            ch.send(_step(STOP))
            got = raise_for(procs.wait(WAIT), f"{side} readers")
    finally:
        ch.close()
    return {"readers": got, "writer_cpu": cpu}


# --- iceoryx2 -----------------------------------------------------------------------------


def iceoryx_path(cache: Path | None = None) -> tuple[Path | None, str]:
    """The directory iceoryx2's Python binding is installed in (``pip install --target``
    into the bench cache at the first call), and ``installed``; or None and why not."""
    target = (cache or anchors.cache_dir()) / "iceoryx2"
    done = target / ".installed"
    if not done.exists():
        try:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target",
                            str(target), ICEORYX], check=True, capture_output=True, text=True,
                           timeout=900)
        except subprocess.CalledProcessError as e:
            return None, "not installed: " + (e.stderr.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            return None, "not installed: pip timed out"
        done.write_text("\n")
    code = "import iceoryx2"
    try:
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                       text=True, timeout=WAIT, env={**os.environ, "PYTHONPATH": str(target)})
    except subprocess.CalledProcessError as e:
        return None, "not loaded: " + (e.stderr.strip().splitlines() or ["?"])[-1]
    return target, "installed"


def _iox(path: str) -> Any:
    sys.path.insert(0, path)
    iox = importlib.import_module(ICEORYX)  # from the bench cache: no stubs for mypy
    iox.set_log_level(iox.LogLevel.Error)
    return iox


def _iox_services(iox: Any, name: str, readers: int) -> tuple[Any, Any, Any]:
    node = iox.NodeBuilder.new().create(iox.ServiceType.Ipc)
    builder = node.service_builder(iox.ServiceName.new(name))
    pubsub = (builder.publish_subscribe(iox.Slice[ctypes.c_uint8])
              .max_subscribers(readers).subscriber_max_buffer_size(16).open_or_create())
    event = (node.service_builder(iox.ServiceName.new(name + "/step")).event()
             .max_listeners(readers).open_or_create())
    return node, pubsub, event


def _iox_reader(path: str, name: str, r: int, readers: int) -> dict[str, Any]:
    iox = _iox(path)
    _node, pubsub, event = _iox_services(iox, name, readers)
    subscriber = pubsub.subscriber_builder().create()
    listener = event.listener_builder().create()
    channel().send(("ready", r))
    late: list[float] = []
    meter = _Meter()
    while True:
        sample = subscriber.receive()
        if sample is None:
            listener.timed_wait(iox.Duration.from_secs_f64(WAIT))
            continue
        data = ctypes.string_at(sample.payload_ptr, sample.payload().len())
        sample.delete()
        if _take(pickle.loads(data), late, meter) == STOP:
            break
    return {"late": late, "cpu": meter.percent}


def _iox_writer(path: str, period: float, readers: int, seconds: float) -> dict[str, Any]:
    iox = _iox(path)
    name = f"verifiedring-bench-cadence-{os.getpid()}-{time.monotonic_ns()}"
    _node, pubsub, event = _iox_services(iox, name, readers)
    publisher = (pubsub.publisher_builder().initial_max_slice_len(CHUNK)
                 .allocation_strategy(iox.AllocationStrategy.PowerOfTwo).create())
    notifier = event.notifier_builder().create()

    def send(kind: int) -> None:
        data = pickle.dumps(_step(kind), protocol=5)
        sample = publisher.loan_slice_uninit(len(data))
        ctypes.memmove(sample.payload_ptr, data, len(data))
        sample.assume_init().send()
        notifier.notify()

    tasks = [Task(_iox_reader, (path, name, r, readers), name=f"{ICEORYX} reader {r}")
             for r in range(readers)]
    with Supervisor(tasks) as procs:
        for t in tasks:
            procs.channel(t.name).recv(WAIT)
        publisher.update_connections()
        for _ in range(WARM_UPS):
            time.sleep(period)
            send(WARM)
        cpu = _schedule(period, seconds, send)
        send(STOP)
        got = raise_for(procs.wait(WAIT), f"{ICEORYX} readers")
    return {"readers": got, "writer_cpu": cpu}


@contextlib.contextmanager
def _iox_segments_removed() -> Iterator[None]:
    """Remove the ``/dev/shm/iox2_*`` segments that appeared while the block ran (its
    processes have all ended by then): iceoryx2 leaves a service's segments behind when
    its last user exits without dropping it, and the bench must leave nothing."""
    before = set(SHM.glob("iox2_*"))
    try:
        yield
    finally:
        for path in set(SHM.glob("iox2_*")) - before:
            path.unlink(missing_ok=True)


# --- the run ------------------------------------------------------------------------------


def _p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[98] if len(xs) > 1 else xs[0]


def _rep(late: list[float], cpus: list[float | None], writer: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {"p50_us": statistics.median(late), "p99_us": _p99(late),
                           "samples": len(late)}
    if writer is not None:
        row["writer_cpu_percent"] = writer
        row["reader_cpu_percent"] = statistics.mean(c for c in cpus if c is not None)
    return row


def _one(side: str, period: float, readers: int, seconds: float, exe: Path | None,
         iox: Path | None) -> dict[str, Any]:
    """One run of ``side`` in cell (``period``, ``readers``): that rep's row."""
    if side == C_FLOOR:
        assert exe is not None
        gaps = [period] * max(int(seconds / period), 1)
        return _rep([us for _, us in run_floor(exe, gaps, readers)], [], None)
    limit = seconds + 4 * WAIT
    if side == ICEORYX:
        task = Task(_iox_writer, (str(iox), period, readers, seconds), name=f"{side} writer")
        with _iox_segments_removed():
            [res] = run_tasks([task], timeout=limit)
    else:
        task = Task(_queue_writer, (side, period, readers, seconds), name=f"{side} writer")
        [res] = run_tasks([task], timeout=limit)
    late = [x for reader in res["readers"] for x in reader["late"]]
    return _rep(late, [reader["cpu"] for reader in res["readers"]], res["writer_cpu"])


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole run: the report of the module docstring."""
    seconds = args.seconds if args.seconds is not None else (1.0 if args.quick else 2.0)
    repeats = int(args.repeats or (1 if args.quick else 2))
    states = anchors.status(names=[s for s in args.sides if s in anchors.VERSIONS])
    skipped = {s: st for s, st in states.items() if st != "loaded"}
    exe, built = build_floor() if C_FLOOR in args.sides else (None, "not asked")
    if exe is None and C_FLOOR in args.sides:
        skipped[C_FLOOR] = built
    iox, installed = iceoryx_path() if ICEORYX in args.sides else (None, "not asked")
    if iox is None and ICEORYX in args.sides:
        skipped[ICEORYX] = installed
    sides = [s for s in (*SIDES, *LEVERS) if s in args.sides and s not in skipped]
    runs = shuffled([(cell, s) for cell in CELLS for s in sides], repeats, args.seed)
    reps: dict[tuple[tuple[float, int], str], list[dict[str, Any]]] = {}
    for i, ((period, readers), side) in enumerate(runs):
        print(f"run {i + 1}/{len(runs)}: {cell_name(period, readers)}, {side} ...", flush=True)
        reps.setdefault(((period, readers), side), []).append(
            _one(side, period, readers, seconds, exe, iox))
    cells = {}
    for period, readers in CELLS:
        got = {s: merge(reps[((period, readers), s)], [k for k in KEYS if k in
                                                         reps[((period, readers), s)][0]])
               for s in sides if ((period, readers), s) in reps}
        cells[cell_name(period, readers)] = {"period_s": period, "readers": readers,
                                             "sides": got}
    return {"machine": machine(), "payload_bytes": PAYLOAD, "seconds": seconds,
            "repeats": repeats, "seed": args.seed, "cells": cells, "skipped": skipped}


def _fmt(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    text = f"{row['p50_us']:.0f} / {row['p99_us']:.0f} us"
    if "reader_cpu_percent" in row:
        text += f", {row['reader_cpu_percent']:.1f} % / {row['writer_cpu_percent']:.1f} %"
    return text


def main(args: argparse.Namespace) -> int:
    report = measure(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cadence.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(f"one writer, R readers, a {PAYLOAD} B step every T: one-way p50 / p99; CPU per "
          f"reader / writer, % of a core ({report['seconds']:g} s per run, medians of "
          f"{report['repeats']} reps)")
    for name, cell in report["cells"].items():
        print(name)
        for side, row in cell["sides"].items():
            print(f"  {side:<14}{_fmt(row)}")
    for side, why in report["skipped"].items():
        print(f"  {side:<14}{why}")
    print(f"wrote {out / 'cadence.json'}")
    return 0
