"""Bounded runs of the multiprocess ring harness (``python -m stress ring``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = 3000


def run_stress(*args: str) -> dict[str, object]:
    """Run the harness as a user would; return its JSON summary."""
    proc = subprocess.run(
        [sys.executable, "-m", "stress", "ring", "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no summary (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    summary: dict[str, object] = json.loads(lines[-1])
    assert proc.returncode == (0 if summary["ok"] else 1), proc.stderr
    return summary


@pytest.mark.stress
@pytest.mark.parametrize("readers", [1, 2, 3])
def test_exact_delivery_with_wrapping(readers: int, shm_segments: object) -> None:
    summary = run_stress(
        "--readers", str(readers),
        "--messages", str(MESSAGES),
        "--max-chunk-bytes", "48",
        "--max-chunks", "2",
        "--seed", str(100 + readers),
        "--pause-prob", "0.02",
        "--stall-timeout", "15",
        "--time-limit", "60",
    )  # fmt: skip
    shm_segments.track(str(summary["segment"]))  # type: ignore[attr-defined]
    assert summary["errors"] == []
    assert summary["ok"] is True
    assert summary["sent"] == MESSAGES
    assert summary["received"] == [MESSAGES] * readers
    assert summary["segment_left"] is False


@pytest.mark.stress
def test_one_chunk_ring_and_full_size_messages(shm_segments: object) -> None:
    summary = run_stress(
        "--readers", "2",
        "--messages", "1000",
        "--max-chunk-bytes", "12",  # header only: every payload is empty
        "--max-chunks", "1",
        "--seed", "7",
        "--time-limit", "60",
    )  # fmt: skip
    shm_segments.track(str(summary["segment"]))  # type: ignore[attr-defined]
    assert summary["errors"] == []
    assert summary["received"] == [1000, 1000]
    assert summary["segment_left"] is False
