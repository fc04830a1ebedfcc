"""ring: one writer and 1..3 reader processes over a real ShmRingBuffer segment.

Message ``k`` is a frame ``<seq u64><length u32><payload>`` whose length and
bytes are derived from ``(seed, k)`` alone, so each reader regenerates and
checks every byte, the order and the count on its own. The writer ends the
stream with a frame of sequence number ``END`` whose length field carries
the number of messages sent. Both sides sometimes pause for a few
microseconds, also while holding a chunk. Every wait is bounded
(``--stall-timeout``); the parent kills processes that outlive
``--time-limit`` and fails. The parent creates the segment and always
unlinks it, also when a child crashed or was killed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import random
import struct
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any

from verifiedring import RingHandle, ShmRingBuffer
from verifiedring.shm import SHM_DIR

FRAME = struct.Struct("<QI")  # sequence number, payload length
END = 2**64 - 1
DEFAULT_MESSAGES = 5000
MAX_PAUSE = 200e-6  # seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--readers", type=int, default=3, choices=(1, 2, 3))
    parser.add_argument(
        "--messages",
        type=int,
        default=None,
        metavar="N",
        help=f"messages to send (default {DEFAULT_MESSAGES}; unlimited with --duration)",
    )
    parser.add_argument("--max-chunk-bytes", type=int, default=256, metavar="B")
    parser.add_argument("--max-chunks", type=int, default=4, metavar="K")
    parser.add_argument(
        "--pause-prob",
        type=float,
        default=0.01,
        help="probability of a tiny random pause at each step of either side",
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="timeout of every single ring wait",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="S",
        help="kill everything and fail after S seconds (default: duration + 60)",
    )


@dataclass(frozen=True)
class Config:
    seed: int
    messages: int | None  # None: until the duration ends
    duration: float | None
    max_payload: int
    pause_prob: float
    stall_timeout: float


def payload(seed: int, seq: int, max_payload: int) -> bytes:
    """The payload of message ``seq``: a length and bytes that only depend on (seed, seq)."""
    rng = random.Random(seed * 1_000_003 + seq)
    return rng.randbytes(rng.randrange(max_payload + 1))


def _pause(rng: random.Random, prob: float) -> None:
    if prob and rng.random() < prob:
        if rng.random() < 0.5:
            os.sched_yield()
        else:
            time.sleep(rng.uniform(0, MAX_PAUSE))


def _writer_main(handle: RingHandle, cfg: Config, results: Any) -> None:
    report: dict[str, Any] = {"role": "writer", "count": 0, "error": None}
    rng = random.Random(f"writer {cfg.seed}")
    ring = ShmRingBuffer.attach(handle)
    try:
        w = ring.writer()
        end = None if cfg.duration is None else time.monotonic() + cfg.duration
        seq = 0
        while (cfg.messages is None or seq < cfg.messages) and (
            end is None or time.monotonic() < end
        ):
            msg = payload(cfg.seed, seq, cfg.max_payload)
            _pause(rng, cfg.pause_prob)
            with w.acquire_write(cfg.stall_timeout) as buf:
                FRAME.pack_into(buf, 0, seq, len(msg))
                buf[FRAME.size : FRAME.size + len(msg)] = msg
                _pause(rng, cfg.pause_prob)
            seq += 1
            report["count"] = seq
        with w.acquire_write(cfg.stall_timeout) as buf:
            FRAME.pack_into(buf, 0, END, seq)
    except Exception:
        report["error"] = f"writer after {report['count']} messages: {traceback.format_exc()}"
    finally:
        ring.close()
        results.put(report)


def _check(seed: int, seq: int, expected: int, data: bytes, max_payload: int) -> str | None:
    """What is wrong with message ``seq`` (expected number ``expected``), or None."""
    if seq != expected:
        what = "a duplicate or reordering" if seq < expected else "a skip"
        return f"expected message #{expected}, got #{seq} ({what})"
    want = payload(seed, seq, max_payload)
    if data == want:
        return None
    if len(data) != len(want):
        return f"message #{seq}: {len(data)} bytes, expected {len(want)}"
    first = next(i for i in range(len(data)) if data[i] != want[i])
    return (
        f"message #{seq}: byte {first} of {len(want)} is {data[first]:#04x}, "
        f"expected {want[first]:#04x}"
    )


def _reader_main(handle: RingHandle, k: int, cfg: Config, results: Any) -> None:
    report: dict[str, Any] = {"role": f"reader{k}", "count": 0, "error": None}
    rng = random.Random(f"reader {k} {cfg.seed}")
    ring = ShmRingBuffer.attach(handle)
    try:
        r = ring.reader(k)
        while True:
            _pause(rng, cfg.pause_prob)
            with r.acquire_read(cfg.stall_timeout) as buf:
                seq, n = FRAME.unpack_from(buf)
                data = b"" if seq == END else bytes(buf[FRAME.size : FRAME.size + n])
                _pause(rng, cfg.pause_prob)
            if seq == END:
                if n != report["count"]:
                    report["error"] = (
                        f"reader {k}: the writer sent {n} messages, it received {report['count']}"
                    )
                break
            problem = _check(cfg.seed, seq, report["count"], data, cfg.max_payload)
            if problem is not None:
                report["error"] = f"reader {k}: {problem}"
                break
            report["count"] += 1
    except Exception:
        report["error"] = f"reader {k} after {report['count']} messages: {traceback.format_exc()}"
    finally:
        ring.close()
        results.put(report)


@dataclass
class Summary:
    kind: str
    ok: bool
    segment: str
    segment_left: bool
    seconds: float
    readers: int
    sent: int
    received: list[int]
    errors: list[str]


def run(args: argparse.Namespace) -> Summary:
    """Run one soak; never leaves the segment behind."""
    if args.max_chunk_bytes < FRAME.size:
        raise SystemExit(f"--max-chunk-bytes must be >= {FRAME.size} (the frame header)")
    messages = args.messages
    if messages is None and args.duration is None:
        messages = DEFAULT_MESSAGES
    cfg = Config(
        seed=args.seed,
        messages=messages,
        duration=args.duration,
        max_payload=args.max_chunk_bytes - FRAME.size,
        pause_prob=args.pause_prob,
        stall_timeout=args.stall_timeout,
    )
    time_limit = args.time_limit or (args.duration or 0.0) + 60.0
    ctx = mp.get_context("spawn")
    start = time.monotonic()
    deadline = start + time_limit
    errors: list[str] = []
    reports: dict[str, dict[str, Any]] = {}
    ring = ShmRingBuffer(args.readers, args.max_chunk_bytes, args.max_chunks)
    procs: list[Any] = []
    try:
        results = ctx.Queue()
        handle = ring.handle()
        procs.append(ctx.Process(target=_writer_main, args=(handle, cfg, results), name="writer"))
        for k in range(args.readers):
            procs.append(
                ctx.Process(target=_reader_main, args=(handle, k, cfg, results), name=f"reader{k}")
            )
        for p in procs:
            p.start()
        while len(reports) < len(procs) and time.monotonic() < deadline:
            try:
                report = results.get(timeout=min(0.5, max(deadline - time.monotonic(), 0.01)))
            except queue.Empty:
                if all(p.exitcode is not None for p in procs) and results.empty():
                    break  # someone died without reporting
                continue
            reports[report["role"]] = report
            if report["error"]:
                break  # the others may now wait forever on the failed one
        failed = any(r["error"] for r in reports.values())
        for p in procs:
            p.join(max(deadline - time.monotonic(), 0.0) if not failed else 0.5)
            if p.is_alive():
                p.kill()
                p.join(5)
                if not failed:
                    errors.append(f"{p.name} (pid {p.pid}) outlived the time limit; killed")
            elif p.exitcode != 0:
                errors.append(f"{p.name} exited with code {p.exitcode}")
        for p in procs:
            if p.name not in reports and not failed:
                errors.append(f"{p.name} sent no report")
        errors[:0] = [r["error"] for r in reports.values() if r["error"]]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        ring.close()
    left = os.path.exists(os.path.join(SHM_DIR, ring.name))
    if left:
        errors.append(f"segment {ring.name} still in {SHM_DIR} after close")
    sent = reports.get("writer", {}).get("count", 0)
    received = [reports.get(f"reader{k}", {}).get("count", 0) for k in range(args.readers)]
    return Summary(
        kind="ring",
        ok=not errors,
        segment=ring.name,
        segment_left=left,
        seconds=round(time.monotonic() - start, 3),
        readers=args.readers,
        sent=sent,
        received=received,
        errors=errors,
    )


def main(args: argparse.Namespace) -> int:
    summary = run(args)
    if args.json:
        print(json.dumps(asdict(summary)), flush=True)
    else:
        status = "ok" if summary.ok else "FAILED"
        print(
            f"stress ring: {status}: {summary.sent} messages to {summary.readers} readers "
            f"(received {summary.received}) in {summary.seconds} s, "
            f"max_chunk_bytes={args.max_chunk_bytes} max_chunks={args.max_chunks} "
            f"seed={args.seed}",
            flush=True,
        )
        for e in summary.errors:
            print(f"  {e}", file=sys.stderr)
    return 0 if summary.ok else 1
