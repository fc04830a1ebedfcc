"""The bench's JSON files as small fixture dicts: ``bench.json`` (:mod:`bench.report`),
``per_op.json`` and ``idle.json``, with the figures the README table's tests expect."""

from __future__ import annotations

from typing import Any

MACHINE = {"cpu": "Test CPU", "cores": 2, "kernel": "6.1", "python": "3.11.7", "load_1min": 0.25}


def _rt(transport: str, n: int, size: int, p50: float) -> dict[str, Any]:
    return {"transport": transport, "readers": n, "size": size, "p50_us": p50, "p90_us": p50 * 2}


def bench_fixture() -> dict[str, Any]:
    rt = [
        _rt("verifiedring", 1, 1024, 20.0), _rt("floor", 1, 1024, 10.0),
        _rt("vllm-0.9.0", 1, 1024, 80.0), _rt("vllm-0.33.0", 1, 1024, 100.0),
        _rt("verifiedring", 2, 1024, 30.0), _rt("floor", 2, 1024, 15.0),
        _rt("verifiedring", 3, 1024, 45.0), _rt("floor", 3, 1024, 15.0),
        _rt("vllm-0.9.0", 2, 1024, 90.0), _rt("vllm-0.9.0", 3, 1024, 120.0),
        _rt("verifiedring-remote", 1, 1024, 1500.0),
    ]
    stream = [
        {"transport": "verifiedring", "readers": 1, "msgs_per_s": 150_000.0},
        {"transport": "floor", "readers": 1, "msgs_per_s": 400_000.0},
        {"transport": "vllm-0.9.0", "readers": 1, "msgs_per_s": 40_000.0},
        {"transport": "vllm-0.33.0", "readers": 1, "msgs_per_s": 50_000.0},
    ]
    large = [
        {"transport": "verifiedring-stream", "readers": 1, "size": 2 << 20, "p50_us": 250.0,
         "gb_per_s_per_reader": 8.0},
        {"transport": "vllm-0.9.0", "readers": 1, "size": 2 << 20, "p50_us": 1000.0,
         "gb_per_s_per_reader": 2.0},
        {"transport": "verifiedring-stream", "readers": 3, "size": 64 << 20, "p50_us": 3e4,
         "gb_per_s_per_reader": 2.5},
        {"transport": "vllm-0.9.0", "readers": 3, "size": 64 << 20, "p50_us": 3e5,
         "gb_per_s_per_reader": 0.25},
    ]
    return {"machine": MACHINE, "vllm": {"vllm-0.9.0": "loaded", "vllm-0.33.0": "loaded"},
            "seed": 20, "repeats": 3, "roundtrip": rt, "stream": stream, "large": large}


PER_OP = {
    "memcpy_gb_per_s": 5.0,
    "cpu_ns_per_pair": {
        "verifiedring": {"median_ns": 1000.0, "ratio_to_pickle": 2.5},
        "vllm-0.9.0": {"median_ns": 8000.0, "ratio_to_pickle": 20.0},
        "pickle": {"median_ns": 400.0, "ratio_to_pickle": 1.0},
    },
}

IDLE = {
    "readers": 2,
    "idle_window_s": [10, 20],
    "queues": {
        "verifiedring": {"first_message_us": {"0.01": {"p50": 60.0, "p90": 90.0},
                                              "1.0": {"p50": 150.0, "p90": 200.0}},
                         "idle_cpu_percent": 0.005},
        "vllm-0.9.0": {"first_message_us": {"0.01": {"p50": 500.0, "p90": 900.0},
                                            "1.0": {"p50": 700.0, "p90": 990.0}},
                       "idle_cpu_percent": 100.0},
    },
    "c_futex_floor_us": {"0.01": {"p50": 40.0, "p90": 50.0}, "1.0": {"p50": 50.0, "p90": 60.0}},
}


def _step(p50: float, p99: float, cpu: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"p50_us": p50, "p99_us": p99, "samples": 100}
    if cpu is not None:
        row.update(reader_cpu_percent=cpu, writer_cpu_percent=1.0)
    return row


CADENCE = {
    "cells": {
        "10 ms, R=2": {"period_s": 0.01, "readers": 2, "sides": {
            "verifiedring": _step(30.0, 100.0, 2.0), "vllm-0.9.0": _step(40.0, 200.0, 100.0),
            "vllm-0.33.0": _step(100.0, 150.0, 99.0), "iceoryx2": _step(50.0, 120.0, 0.5),
            "c-futex": _step(10.0, 20.0)}},
        "2 ms, R=1": {"period_s": 0.002, "readers": 1, "sides": {
            "verifiedring": _step(60.0, 300.0, 20.0), "vllm-0.9.0": _step(50.0, 100.0, 60.0)}},
    },
}
