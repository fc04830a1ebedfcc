"""queue_roundtrip: MessageQueue latency, streaming rate and large objects vs baselines.

Two processes, A and B, all figures from the same run:

* **round trip, 1 KiB object**: A enqueues on q1, B dequeues and enqueues an
  ack on q2, A dequeues it. Baselines: the ring's own ping-pong and the
  hand-written raw shared-memory flag ping-pong (``bench.ring_pingpong``),
  ``multiprocessing.Pipe``, a ZeroMQ ipc PAIR with pickle, and gloo
  ``broadcast_object_list`` (2 ranks, there and back).
* **streaming**: A enqueues N small objects, B dequeues them all; objects/s.
  Baselines: Pipe and ZeroMQ ipc.
* **large objects**: a 2 MiB ``bytes`` and a 2 MiB numpy array round trip,
  inline (chunk 4 MiB) and through overflow (chunk 1 MiB). Baselines: Pipe and
  ZeroMQ ipc with pickle.

Reported as microseconds (or objects/s) and ratios to the baselines. Nothing
asserts on time. Measure on an idle machine: both processes spin.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from verifiedring.testing.launcher import Supervisor, Task, raise_for, run_group

WAIT = 60.0
PAYLOAD_1K = b"x" * 1024
LARGE = 2 * 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=5000, help="1 KiB round trips per repeat")
    parser.add_argument("--stream", type=int, default=100_000, help="objects per stream repeat")
    parser.add_argument("--large", type=int, default=100, help="large round trips per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-gloo", action="store_true", help="skip the gloo baseline")


def _large_objects() -> dict[str, Any]:
    import numpy as np

    return {"bytes": os.urandom(LARGE), "numpy": np.arange(LARGE // 8, dtype=np.float64)}


# --- channels: each gives A and B a send/recv pair -----------------------------------


class _QueueEnd:
    def __init__(self, out: Any, inp: Any) -> None:
        self.send = out.enqueue
        self.recv = inp.dequeue
        self._qs = (out, inp)

    def close(self) -> None:
        for q in self._qs:
            q.close()


def _queue_pair_a(ctl: Any, chunk: int) -> _QueueEnd:
    from verifiedring import MessageQueue

    q1 = MessageQueue(1, 1, [1], max_chunk_bytes=chunk, max_chunks=10)
    ctl.send(q1.export_handle())
    r2 = MessageQueue.create_from_handle(ctl.recv(), 0)
    q1.wait_until_ready(WAIT)
    r2.wait_until_ready(WAIT)
    return _QueueEnd(q1, r2)


def _queue_pair_b(ctl: Any, chunk: int) -> _QueueEnd:
    from verifiedring import MessageQueue

    r1 = MessageQueue.create_from_handle(ctl.recv(), 1)
    q2 = MessageQueue(1, 1, [0], max_chunk_bytes=chunk, max_chunks=10)
    ctl.send(q2.export_handle())
    r1.wait_until_ready(WAIT)
    q2.wait_until_ready(WAIT)
    return _QueueEnd(q2, r1)


class _Zmq:
    def __init__(self, address: str, bind: bool) -> None:
        import zmq

        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PAIR)
        self.sock.bind(address) if bind else self.sock.connect(address)

    def send(self, obj: Any) -> None:
        self.sock.send(pickle.dumps(obj, protocol=5), copy=False)

    def recv(self) -> Any:
        return pickle.loads(self.sock.recv(copy=False).buffer)

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


class _Pipe:
    def __init__(self, conn: Any) -> None:
        self.send, self.recv, self.close = conn.send, conn.recv, lambda: None


def _open(kind: str, side: str, ctl: Any, data_conn: Any, ipc: str) -> Any:
    if kind.startswith("queue"):
        chunk = {"queue": 64 * 1024, "queue-inline": 4 << 20, "queue-overflow": 1 << 20}[kind]
        return (_queue_pair_a if side == "a" else _queue_pair_b)(ctl, chunk)
    if kind == "zmq":
        return _Zmq(ipc, bind=side == "a")
    return _Pipe(data_conn)


# --- workloads -------------------------------------------------------------------------


def _b_loop(end: Any, mode: str, n: int, ctl: Any) -> None:
    if mode == "stream":
        for _ in range(n):
            end.recv()
        ctl.send("done")
    else:
        for _ in range(n):
            end.recv()
            end.send(1)


def _a_loop(end: Any, mode: str, n: int, obj: Any, ctl: Any) -> float:
    t0 = time.perf_counter()
    if mode == "stream":
        for i in range(n):
            end.send(i)
        ctl.recv()
    else:
        for _ in range(n):
            end.send(obj)
            end.recv()
    return time.perf_counter() - t0


def _peer_b(kind: str, ctl: Any, data_conn: Any, ipc: str, plan: list[tuple[str, int]]) -> None:
    end = _open(kind, "b", ctl, data_conn, ipc)
    try:
        for mode, n in plan:
            _b_loop(end, mode, n, ctl)
    finally:
        end.close()


def _measure(kind: str, plan: list[tuple[str, int, Any]], repeats: int) -> dict[str, float]:
    """Median seconds per repeat, per mode (the first item of ``plan`` is a warm-up)."""
    ctx = mp.get_context("spawn")
    ctl_a, ctl_b = ctx.Pipe()
    data_a, data_b = ctx.Pipe()
    ipc_dir = tempfile.mkdtemp(prefix="vr-bench-")
    ipc = f"ipc://{ipc_dir}/pair"
    b_plan = [(mode, n) for mode, n, _ in plan for _ in range(repeats + 1)]
    out: dict[str, list[float]] = {}
    try:
        with Supervisor([Task(_peer_b, (kind, ctl_b, data_b, ipc, b_plan), "B")]) as b:
            end = _open(kind, "a", ctl_a, data_a, ipc)
            try:
                for mode, n, obj in plan:
                    for rep in range(repeats + 1):
                        t = _a_loop(end, mode, n, obj, ctl_a)
                        if rep:  # the first is a warm-up
                            out.setdefault(mode, []).append(t / n)
            finally:
                end.close()
            raise_for(b.wait(WAIT))
    finally:
        shutil.rmtree(ipc_dir, ignore_errors=True)
    return {mode: statistics.median(ts) for mode, ts in out.items()}


def _gloo_rank(rank: int, world: int, n: int, repeats: int) -> float:
    """Median seconds per 1 KiB round trip (rank 0 to 1 and back) over gloo."""
    import torch.distributed as dist

    samples = []
    for rep in range(repeats + 1):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            box = [PAYLOAD_1K if rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            ack = [1 if rank == 1 else None]
            dist.broadcast_object_list(ack, src=1)
        if rep:
            samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


def _measure_gloo(n: int, repeats: int) -> float:
    from bench import queue_roundtrip as mod  # by its importable name, for spawn

    return float(run_group(mod._gloo_rank, 2, args=(n, repeats), timeout=WAIT * 5)[0])


def _ring_baselines(rounds: int, repeats: int) -> tuple[float, float]:
    from bench import ring_pingpong

    t = ring_pingpong.measure(argparse.Namespace(rounds=rounds, repeats=repeats, warmup=500))
    return statistics.median(t["ring"]) * 1e-6, statistics.median(t["raw"]) * 1e-6


def main(args: argparse.Namespace) -> int:
    large = _large_objects()
    rt = [("rt", args.rounds, PAYLOAD_1K), ("stream", args.stream, None)]
    big = [(f"large-{k}", args.large, v) for k, v in large.items()]
    res: dict[str, dict[str, float]] = {}
    for kind, plan in (
        ("queue", rt),
        ("pipe", rt + big),
        ("zmq", rt + big),
        ("queue-inline", big),
        ("queue-overflow", big),
    ):
        res[kind] = _measure(kind, plan, args.repeats)
    ring, raw = _ring_baselines(args.rounds, args.repeats)
    gloo = None if args.no_gloo else _measure_gloo(max(args.rounds // 10, 100), args.repeats)

    us = 1e6
    q = res["queue"]["rt"]
    print(f"queue_roundtrip: {args.repeats} repeats (median), 2 processes, cores={os.cpu_count()}")
    rows: list[tuple[str, float | None]] = [
        ("MessageQueue (q1 -> q2)", q),
        ("ShmRingBuffer ping-pong", ring),
        ("raw shm flags (hand-written floor)", raw),
        ("multiprocessing.Pipe", res["pipe"]["rt"]),
        ("zmq ipc PAIR + pickle", res["zmq"]["rt"]),
        ("gloo broadcast_object_list x2", gloo),
    ]
    print(f"\n1 KiB object round trip{'us':>24}{'queue / this':>16}")
    for name, t in rows:
        if t is not None:
            print(f"  {name:<38}{t * us:>9.2f}{q / t:>16.2f}")
    print(f"  target: queue / raw <= 3.00 -> {q / raw:.2f}")

    print(f"\nstreaming small objects to 1 reader{'objects/s':>15}{'queue / this':>16}")
    qs = res["queue"]["stream"]
    for name, t in (("MessageQueue", qs), ("multiprocessing.Pipe", res["pipe"]["stream"]),
                    ("zmq ipc PAIR + pickle", res["zmq"]["stream"])):
        print(f"  {name:<38}{1 / t:>12,.0f}{t / qs:>16.2f}")

    print(f"\n2 MiB object round trip{'us':>24}{'GB/s':>8}{'queue / pipe':>14}{'queue / zmq':>13}")
    for k in large:
        mode = f"large-{k}"
        for kind, label in (("queue-inline", "inline, 4 MiB chunk"),
                            ("queue-overflow", "overflow, 1 MiB chunk")):
            t = res[kind][mode]
            print(f"  MessageQueue {k:<6} {label:<19}{t * us:>9.0f}{LARGE / t / 1e9:>8.2f}"
                  f"{res['pipe'][mode] / t:>14.2f}{res['zmq'][mode] / t:>13.2f}")
        for kind, label in (("pipe", "multiprocessing.Pipe"), ("zmq", "zmq ipc PAIR + pickle")):
            t = res[kind][mode]
            print(f"  {label + ' ' + k:<38}{t * us:>9.0f}{LARGE / t / 1e9:>8.2f}")
    print("  (queue / pipe, queue / zmq: > 1 means the queue is faster)")
    return 0


def _cli() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.queue_roundtrip", description=__doc__)
    add_arguments(parser)
    return main(parser.parse_args())


if __name__ == "__main__":
    sys.exit(_cli())
