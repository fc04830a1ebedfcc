"""ring_pingpong: a 1 KiB round trip through two rings vs a hand-written flag ping-pong.

Process A writes 1 KiB into ring 1; process B reads it and writes an 8-byte ack
into ring 2; A reads the ack. The baseline does the same between the same two
processes over a raw shared-memory file with one flag byte per direction and
no library: store payload, set flag; spin (``sched_yield``) until the peer's
flag is set; copy out; clear it. Both are measured in the same run, in
alternating rounds, and reported as microseconds per round trip and their
ratio (ring / baseline).
"""

from __future__ import annotations

import argparse
import mmap
import os
import secrets
import statistics
import time
from typing import Any

from verifiedring import RingHandle, ShmRingBuffer
from verifiedring.shm import SHM_DIR
from verifiedring.testing.launcher import Supervisor, Task, raise_for

PAYLOAD = 1024
ACK = 8
WAIT = 30.0  # seconds: the most any single hand-off may take

# Raw baseline layout: [ping flag][pong flag][ping payload][pong payload]
PING, PONG = 0, 1
PING_DATA = 2
PONG_DATA = PING_DATA + PAYLOAD
RAW_BYTES = PONG_DATA + ACK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=20000, help="round trips per repeat")
    parser.add_argument("--repeats", type=int, default=5, help="alternating repeats per method")
    parser.add_argument("--warmup", type=int, default=2000, help="round trips before timing")


def _spin_until(buf: mmap.mmap, at: int, deadline: float) -> None:
    yield_ = os.sched_yield
    while buf[at] != 1:
        yield_()
        if time.monotonic() > deadline:
            raise TimeoutError(f"raw ping-pong: flag {at} not set within {WAIT} s")


def _raw_a(buf: mmap.mmap, payload: bytes, n: int) -> None:
    deadline = time.monotonic() + WAIT
    for _ in range(n):
        buf[PING_DATA:PONG_DATA] = payload
        buf[PING] = 1
        _spin_until(buf, PONG, deadline)
        bytes(buf[PONG_DATA:RAW_BYTES])
        buf[PONG] = 0


def _raw_b(buf: mmap.mmap, n: int) -> None:
    deadline = time.monotonic() + WAIT
    for _ in range(n):
        _spin_until(buf, PING, deadline)
        data = buf[PING_DATA:PONG_DATA]  # a copy, like bytes(view)
        buf[PING] = 0
        buf[PONG_DATA:RAW_BYTES] = data[:ACK]
        buf[PONG] = 1


def _ring_a(w: Any, r: Any, payload: bytes, n: int) -> None:
    for _ in range(n):
        with w.acquire_write(WAIT) as buf:
            buf[:PAYLOAD] = payload
        with r.acquire_read(WAIT) as buf:
            bytes(buf[:ACK])


def _ring_b(r: Any, w: Any, n: int) -> None:
    for _ in range(n):
        with r.acquire_read(WAIT) as buf:
            data = bytes(buf[:PAYLOAD])
        with w.acquire_write(WAIT) as buf:
            buf[:ACK] = data[:ACK]


def _schedule(args: argparse.Namespace) -> list[tuple[str, int]]:
    """What both processes run, in order: (method, round trips)."""
    plan = [("ring", args.warmup), ("raw", args.warmup)]
    for _ in range(args.repeats):
        plan += [("ring", args.rounds), ("raw", args.rounds)]
    return plan


def _process_b(h1: RingHandle, h2: RingHandle, raw_path: str, plan: list[tuple[str, int]]) -> None:
    ring1, ring2 = ShmRingBuffer.attach(h1), ShmRingBuffer.attach(h2)
    fd = os.open(raw_path, os.O_RDWR)
    raw = mmap.mmap(fd, RAW_BYTES)
    os.close(fd)
    try:
        r, w = ring1.reader(0), ring2.writer()
        for method, n in plan:
            if method == "ring":
                _ring_b(r, w, n)
            else:
                _raw_b(raw, n)
    finally:
        raw.close()
        ring2.close()
        ring1.close()


def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    """Microseconds per round trip of each timed repeat, per method."""
    plan = _schedule(args)
    payload = bytes(range(256)) * (PAYLOAD // 256)
    raw_path = os.path.join(SHM_DIR, f"vrbench_{secrets.token_hex(6)}")
    fd = os.open(raw_path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    times: dict[str, list[float]] = {"ring": [], "raw": []}
    try:
        os.ftruncate(fd, RAW_BYTES)
        raw = mmap.mmap(fd, RAW_BYTES)
        os.close(fd)
        with ShmRingBuffer(1, PAYLOAD, 2) as ring1, ShmRingBuffer(1, PAYLOAD, 2) as ring2:
            w, r = ring1.writer(), ring2.reader(0)
            peer = Task(_process_b, (ring1.handle(), ring2.handle(), raw_path, plan), "B")
            with Supervisor([peer]) as b:
                for k, (method, n) in enumerate(plan):
                    start = time.perf_counter()
                    if method == "ring":
                        _ring_a(w, r, payload, n)
                    else:
                        _raw_a(raw, payload, n)
                    if k >= 2:  # past the warm-up
                        times[method].append((time.perf_counter() - start) / n * 1e6)
                raise_for(b.wait(WAIT))
        raw.close()
    finally:
        os.unlink(raw_path)
    return times


def main(args: argparse.Namespace) -> int:
    times = measure(args)
    ring, raw = statistics.median(times["ring"]), statistics.median(times["raw"])
    print(f"1 KiB ping-pong, 1 reader per ring, {args.repeats} x {args.rounds} round trips")
    print(f"{'method':<34}{'us/round trip':>14}{'min':>9}{'max':>9}")
    rows = [("verifiedring (2 rings)", "ring"), ("raw flags + copy (baseline)", "raw")]
    for name, method in rows:
        ts = times[method]
        print(f"{name:<34}{statistics.median(ts):>14.2f}{min(ts):>9.2f}{max(ts):>9.2f}")
    print(f"{'ratio ring / baseline':<34}{ring / raw:>14.2f}   (target <= 2.00)")
    return 0
