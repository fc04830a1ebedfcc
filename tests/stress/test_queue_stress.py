"""Bounded runs of the MessageQueue harness (``python -m stress queue``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OBJECTS = 2000  # the standalone default is 10,000; this keeps each run well under 60 s


def run_stress(*args: str) -> dict[str, object]:
    """Run the harness as a user would; return its JSON summary."""
    proc = subprocess.run(
        [sys.executable, "-m", "stress", "queue", "--json", *args],
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
@pytest.mark.parametrize(
    "readers,remote_window", [(1, 64), (3, 8)], ids=["1-local", "3-local-tight-window"]
)
def test_exact_delivery_local_and_remote(readers: int, remote_window: int) -> None:
    summary = run_stress(
        "--readers", str(readers),
        "--remote", "1",
        "--objects", str(OBJECTS),
        "--max-chunk-bytes", str(40 * 1024),
        "--max-chunks", "2",
        "--remote-window", str(remote_window),
        "--seed", str(readers * 31),
    )
    assert summary["ok"], summary["errors"]
    assert summary["sent"] == OBJECTS
    received = summary["received"]
    assert isinstance(received, dict) and len(received) == readers + 1
    assert set(received.values()) == {OBJECTS}
    assert summary["segment_left"] is False
