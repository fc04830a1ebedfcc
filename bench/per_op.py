"""per_op: CPU time per enqueue + dequeue in one process, and the memcpy floor.

* **per-op CPU**: one process holds a MessageQueue's writer and its one local
  reader (the READY handshake in a thread, since each side waits for the other);
  ``time.process_time_ns`` over ``--ops`` enqueue + dequeue pairs of a 1 KiB
  ``bytes``, per pair. Sides: ``verifiedring``, ``verifiedring-python-steps`` (the same
  with its native step core off: :mod:`verifiedring.native`), each vLLM anchor that loads
  (:mod:`bench.anchors`; one version per process) and ``pickle`` (``pickle.dumps`` +
  ``pickle.loads`` of the same object: the least a queue of pickled objects does).
  Each side runs in its own worker process, kept for the whole run; the
  ``--repeats`` reps of all sides run in an order shuffled by
  ``random.Random(--seed)`` (:mod:`bench.reps`; the seed is in the JSON); each
  figure is the median of its reps, with its ratio to ``pickle``.
* **memcpy floor**: GB/s of a 64 MiB ``bytearray`` slice copy in this process
  (median of ``--copies``), the floor of the 64 MiB row of :mod:`bench.report`.

Writes ``<out>/per_op.json``. Default wall time on a 2-core VM: about 8 s, most
of it the workers' start.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from . import anchors
from .reps import Workers, shuffled

WAIT = 60.0
SIZE = 1024
COPY_BYTES = 64 * 1024 * 1024
PICKLE = "pickle"
#: verifiedring with the native step core off, in its worker process.
PYTHON_STEPS = "verifiedring-python-steps"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="bench/results", help="directory for per_op.json")
    parser.add_argument("--ops", type=int, default=20_000, help="enqueue + dequeue pairs per rep")
    parser.add_argument("--repeats", type=int, default=5, help="reps of every side")
    parser.add_argument("--seed", type=int, default=20, help="the shuffle's seed")
    parser.add_argument("--copies", type=int, default=9, help="64 MiB copies timed")


def _queue_type(side: str) -> Any:
    if side in anchors.VERSIONS:
        return anchors.load(side)
    from verifiedring import MessageQueue

    return MessageQueue


def _connected_pair(side: str) -> tuple[Any, Any]:
    """A writer for one local reader and that reader, both in this process, ready."""
    mq = _queue_type(side)
    writer = mq(1, 1, max_chunk_bytes=4 * SIZE, max_chunks=8)
    reader = mq.create_from_handle(writer.export_handle(), 0)
    failed: list[BaseException] = []

    def reader_ready() -> None:
        try:
            reader.wait_until_ready()
        except BaseException as e:  # reported by the caller
            failed.append(e)

    t = threading.Thread(target=reader_ready, daemon=True)
    t.start()
    writer.wait_until_ready()
    t.join(WAIT)
    if t.is_alive() or failed:
        raise RuntimeError(f"{side}: the reader's READY did not arrive: {failed}")
    return writer, reader


def _close(*queues: Any) -> None:
    for q in queues:
        close = getattr(q, "close", None)  # vLLM's queue has none: collection frees it
        if close is not None:
            close()


def cpu_per_pair(side: str, ops: int) -> float:
    """CPU nanoseconds of this process per enqueue + dequeue pair (or dumps + loads)."""
    payload = os.urandom(SIZE)
    if side == PICKLE:
        dumps, loads = pickle.dumps, pickle.loads
        t = time.process_time_ns()
        for _ in range(ops):
            loads(dumps(payload, protocol=5))
        return (time.process_time_ns() - t) / ops
    if side == PYTHON_STEPS:
        from verifiedring import native

        native.ENABLED = False  # this worker process runs this side only
    writer, reader = _connected_pair(side)
    try:
        for _ in range(max(ops // 10, 10)):  # warm
            writer.enqueue(payload)
            reader.dequeue()
        enqueue, dequeue = writer.enqueue, reader.dequeue
        t = time.process_time_ns()
        for _ in range(ops):
            enqueue(payload)
            got = dequeue()
        spent = time.process_time_ns() - t
        if got != payload:
            raise AssertionError(f"{side}: the reader got another object")
        return spent / ops
    finally:
        _close(reader, writer)


def memcpy_gb_per_s(copies: int) -> float:
    """GB/s of a 64 MiB bytearray slice copy, the median of ``copies``."""
    src = bytearray(os.urandom(1024)) * (COPY_BYTES // 1024)
    dst = bytearray(COPY_BYTES)
    dst[:] = src  # fault the pages in
    times = []
    for _ in range(copies):
        t = time.perf_counter()
        dst[:] = src
        times.append(time.perf_counter() - t)
    return COPY_BYTES / statistics.median(times) / 1e9


def measure(args: argparse.Namespace, loaded: list[str]) -> dict[str, Any]:
    """The per_op JSON: ``cpu_ns_per_pair`` per side (median, reps, ratio to pickle)
    and ``memcpy_gb_per_s``; ``loaded`` are the vLLM anchors to include."""
    sides = ["verifiedring", PYTHON_STEPS, *loaded, PICKLE]
    reps: dict[str, list[float]] = {s: [] for s in sides}
    with Workers(sides) as workers:
        for side in shuffled(sides, args.repeats, args.seed):
            print(f"per-op CPU {side} ...", flush=True)
            reps[side].append(workers.run(side, cpu_per_pair, side, args.ops))
    base = statistics.median(reps[PICKLE])
    cpu = {s: {"median_ns": statistics.median(xs), "reps_ns": xs,
               "ratio_to_pickle": round(statistics.median(xs) / base, 3)}
           for s, xs in reps.items()}
    return {"seed": args.seed, "ops": args.ops, "size": SIZE, "cpu_ns_per_pair": cpu,
            "memcpy_gb_per_s": memcpy_gb_per_s(args.copies)}


def main(args: argparse.Namespace) -> int:
    status = anchors.status()
    loaded = [name for name, state in status.items() if state == "loaded"]
    result = measure(args, loaded)
    result["vllm"] = status
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "per_op.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    for side, r in result["cpu_ns_per_pair"].items():
        print(f"  {side:14s} {r['median_ns'] / 1000:7.2f} us CPU per pair  "
              f"x pickle {r['ratio_to_pickle']}")
    print(f"  memcpy {result['memcpy_gb_per_s']:.2f} GB/s; wrote {out / 'per_op.json'}")
    return 0
