"""report: the benchmarks people read -- JSON and PNG plots, every figure a ratio.

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

Every latency is also given as a ratio to the floor ring (and to vLLM when
present) measured in the same run; the JSON holds the machine's description.
Writes ``<out>/bench.json`` and ``<out>/*.png``. Measure on an idle machine: the
processes spin.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verifiedring.testing.launcher import Supervisor, Task, raise_for

from . import anchors

WAIT = 60.0
ACK = b"k"
SIZES = (64, 1024, 64 * 1024, 1024 * 1024)
CHUNK = 2 * 1024 * 1024 + 4096  # every payload fits a chunk: the ring path, not overflow
SLOTS = 8
LARGE_CHUNK = 1024 * 1024  # objects above it: a run, or the overflow socket
LARGE_MODES = {"verifiedring-stream": "stream", "verifiedring-socket": "socket"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="bench/results", help="directory for JSON and PNGs")
    parser.add_argument("--rounds", type=int, default=4000, help="round trips at <= 1 KiB")
    parser.add_argument("--stream", type=int, default=50_000, help="objects per stream run")
    parser.add_argument("--readers", type=int, default=3, help="most readers")
    parser.add_argument("--no-idle", action="store_true", help="skip the idle wake-up bench")
    parser.add_argument("--no-plots", action="store_true", help="JSON only")
    parser.add_argument("--only-large", action="store_true",
                        help="only the large-object section (quick)")


def _anchors() -> list[str]:
    """The vLLM anchors that load here (:mod:`bench.anchors`); why the others do not is
    in the JSON's ``vllm`` entry."""
    return [name for name, state in VLLM.items() if state == "loaded"]


VLLM: dict[str, str] = {}
TRANSPORTS = ["verifiedring", "verifiedring-remote", "floor", "pipe"]


# --- channels ---------------------------------------------------------------------


def _queue_type(transport: str) -> Any:
    if transport in anchors.VERSIONS:
        return anchors.load(transport)
    from verifiedring import MessageQueue

    return MessageQueue


def _new_queue(transport: str, n: int, chunk: int) -> Any:
    """A writer for ``n`` readers: local ring, or remote over loopback TCP."""
    mq = _queue_type(transport)
    if transport == "verifiedring-remote":
        return mq(n, 0, connect_ip="127.0.0.1", max_chunk_bytes=chunk, max_chunks=SLOTS)
    if transport in LARGE_MODES:
        return mq(n, n, max_chunk_bytes=chunk, max_chunks=SLOTS,
                  large_objects=LARGE_MODES[transport])
    return mq(n, n, max_chunk_bytes=chunk, max_chunks=SLOTS)


class _Channels:
    """The writer's side: one forward channel to every reader, one back from each."""

    def __init__(self, transport: str, n: int, ctx: Any, chunk: int) -> None:
        self.transport, self.n = transport, n
        self.backs: list[Any] = []
        if transport == "pipe":
            pairs = [ctx.Pipe() for _ in range(n)]
            self.ends = [a for a, _ in pairs]
            self.child_args: list[Any] = [b for _, b in pairs]
        elif transport == "floor":
            from .floor import FloorRing

            self.fwd: Any = FloorRing(n, CHUNK, SLOTS)
            self.backs = [FloorRing(1, 4096, SLOTS) for _ in range(n)]
            self.child_args = [(self.fwd.name, b.name) for b in self.backs]
        else:
            self.fwd = _new_queue(transport, n, chunk)
            self.handles = ctx.Queue()
            self.child_args = [(self.fwd.export_handle(), self.handles) for _ in range(n)]

    def connect(self) -> None:
        """After the children started: the queues' handshakes; for the others, one ack
        from every reader (a spawned child takes a while to start)."""
        if self.transport in ("pipe", "floor"):
            self.gather()
            return
        got = dict(self.handles.get(timeout=WAIT) for _ in range(self.n))
        mq = _queue_type(self.transport)
        self.backs = [mq.create_from_handle(got[r], 0) for r in range(self.n)]
        self.fwd.wait_until_ready()
        for b in self.backs:
            b.wait_until_ready()

    def send(self, obj: Any) -> None:
        if self.transport == "pipe":
            for e in self.ends:
                e.send(obj)
        elif self.transport == "floor":
            self.fwd.send(obj)
        else:
            self.fwd.enqueue(obj)

    def gather(self) -> None:
        if self.transport == "pipe":
            for e in self.ends:
                e.recv()
        elif self.transport == "floor":
            for b in self.backs:
                b.recv(0)
        else:
            for b in self.backs:
                b.dequeue()

    def close(self) -> None:
        if self.transport == "pipe":
            return
        if self.transport == "floor":
            self.fwd.close(unlink=True)
            for b in self.backs:
                b.close(unlink=True)
            return
        for q in (*self.backs, self.fwd):
            close = getattr(q, "close", None)  # vLLM's queue has none: collection frees it
            if close is not None:
                close()


_Ends = tuple[Callable[[], Any], Callable[[], None], Callable[[], None]]


def _pipe_ends(end: Any) -> _Ends:
    def ack() -> None:
        end.send(ACK)

    return end.recv, ack, lambda: None


def _floor_ends(names: Any, r: int, n: int) -> _Ends:
    from .floor import FloorRing

    fwd = FloorRing(n, CHUNK, SLOTS, name=names[0])
    back = FloorRing(1, 4096, SLOTS, name=names[1])

    def recv() -> Any:
        return fwd.recv(r)

    def ack() -> None:
        back.send(ACK)

    def close() -> None:
        fwd.close()
        back.close()

    return recv, ack, close


def _queue_ends(transport: str, args: Any, r: int) -> _Ends:
    handle, handles = args
    mq = _queue_type(transport)
    q = mq.create_from_handle(handle, r)
    if transport == "verifiedring-remote":
        back_q = mq(1, 0, connect_ip="127.0.0.1", max_chunk_bytes=4096, max_chunks=SLOTS)
    else:
        back_q = mq(1, 1, max_chunk_bytes=4096, max_chunks=SLOTS)
    handles.put((r, back_q.export_handle()))
    back_q.wait_until_ready()
    q.wait_until_ready()

    def ack() -> None:
        back_q.enqueue(ACK)

    return q.dequeue, ack, lambda: None


def _reader(transport: str, args: Any, r: int, n: int, plan: list[tuple[int, int]]) -> int:
    """Reader ``r``: for each (count, ack_every) of ``plan``, receive ``count`` objects
    and answer every ``ack_every``-th; the number received."""
    if transport == "pipe":
        recv, ack, close = _pipe_ends(args)
    elif transport == "floor":
        recv, ack, close = _floor_ends(args, r, n)
    else:
        recv, ack, close = _queue_ends(transport, args, r)
    if transport in ("pipe", "floor"):
        ack()  # running: the writer's connect() waits for this
    got = 0
    for count, every in plan:
        for i in range(count):
            recv()
            got += 1
            if (i + 1) % every == 0:
                ack()
    close()
    return got


def _run(
    transport: str, n: int, plan: list[tuple[int, int]], drive: Any, chunk: int = CHUNK
) -> Any:
    ctx = mp.get_context("spawn")
    ch = _Channels(transport, n, ctx, chunk)
    try:
        tasks = [Task(_reader, (transport, ch.child_args[r], r, n, plan), name=f"reader {r}")
                 for r in range(n)]
        with Supervisor(tasks) as procs:
            ch.connect()
            result = drive(ch)
            raise_for(procs.wait(WAIT), f"{transport} readers")
    finally:
        ch.close()
    return result


def roundtrip(transport: str, n: int, size: int, rounds: int) -> dict[str, Any]:
    """p50/p90 of ``rounds`` round trips of a ``size``-byte payload to ``n`` readers."""
    payload = os.urandom(size)
    warm = max(rounds // 10, 10)

    def drive(ch: _Channels) -> list[float]:
        times = []
        for i in range(warm + rounds):
            t = time.perf_counter()
            ch.send(payload)
            ch.gather()
            if i >= warm:
                times.append(time.perf_counter() - t)
        return times

    times = _run(transport, n, [(warm + rounds, 1)], drive)
    qs = statistics.quantiles(times, n=10)
    return {"transport": transport, "readers": n, "size": size,
            "p50_us": statistics.median(times) * 1e6, "p90_us": qs[8] * 1e6}


def large(transport: str, n: int, size: int, rounds: int) -> dict[str, Any]:
    """Round trips of a ``size``-byte ``bytes`` nested in a tuple to ``n`` readers over
    1 MiB chunks: p50, and the bytes each reader received per second."""
    payload = (os.urandom(size),)

    def drive(ch: _Channels) -> list[float]:
        times = []
        for i in range(rounds + 2):
            t = time.perf_counter()
            ch.send(payload)
            ch.gather()
            if i >= 2:
                times.append(time.perf_counter() - t)
        return times

    times = _run(transport, n, [(rounds + 2, 1)], drive, LARGE_CHUNK)
    p50 = statistics.median(times)
    return {"transport": transport, "readers": n, "size": size, "p50_us": p50 * 1e6,
            "gb_per_s_per_reader": size / p50 / 1e9}


def stream(transport: str, n: int, count: int) -> dict[str, Any]:
    """Messages per second per reader, ``count`` 1 KiB objects streamed to ``n`` readers."""
    payload = os.urandom(1024)

    def drive(ch: _Channels) -> float:
        t = time.perf_counter()
        for _ in range(count):
            ch.send(payload)
        ch.gather()  # each reader acks once, after the last
        return time.perf_counter() - t

    seconds = _run(transport, n, [(count, count)], drive)
    return {"transport": transport, "readers": n, "msgs_per_s": count / seconds}


def _measure(fn: Callable[..., dict[str, Any]], transport: str, *args: Any) -> dict[str, Any]:
    """``fn(transport, *args)``; for a vLLM anchor in a fresh process (its writer too),
    since both anchors are the package ``vllm``."""
    if transport not in anchors.VERSIONS:
        return fn(transport, *args)
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(fn, transport, *args).result()


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
    rows: list[dict[str, Any]] = []
    for size in SIZES:
        rounds = args.rounds if size <= 1024 else max(args.rounds // (size // 1024), 100)
        for t in TRANSPORTS + _anchors():
            print(f"round trip {t} {size} B ...", flush=True)
            rows.append(_measure(roundtrip, t, 1, size, rounds))
    for n in range(2, args.readers + 1):
        for t in ("verifiedring", "floor", *_anchors()):
            print(f"round trip {t} 1 KiB x {n} readers ...", flush=True)
            rows.append(_measure(roundtrip, t, n, 1024, args.rounds))
    for base in ("floor", *_anchors()):
        _ratios(rows, "p50_us", base)
    return rows


def measure_streams(args: argparse.Namespace) -> list[dict[str, Any]]:
    streams = []
    for n in range(1, args.readers + 1):
        for t in ("verifiedring", "floor", "pipe", *_anchors()):
            print(f"stream {t} x {n} readers ...", flush=True)
            streams.append(_measure(stream, t, n, args.stream))
    for base in ("floor", *_anchors()):
        _ratios(streams, "msgs_per_s", base)
    return streams


def measure(args: argparse.Namespace) -> dict[str, Any]:
    VLLM.update(anchors.status())
    report: dict[str, Any] = {"machine": machine(), "vllm": dict(VLLM)}
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
    if not args.no_plots:
        from .plots import plot

        for p in plot(report, out):
            print(f"wrote {p}")
    return 0
