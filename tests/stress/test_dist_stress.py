"""Bounded runs of ``python -m stress gloo`` and ``python -m stress nccl``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_stress(kind: str, *args: str) -> dict[str, object]:
    """Run the harness as a user would; return its JSON summary."""
    proc = subprocess.run(
        [sys.executable, "-m", "stress", kind, "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no summary (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    summary: dict[str, object] = json.loads(lines[-1])
    assert proc.returncode == (0 if summary["ok"] else 1), proc.stderr
    return summary


@pytest.mark.stress
@pytest.mark.timeout(180)
def test_gloo_mixed_round_trips() -> None:
    summary = run_stress("gloo", "--world-size", "2", "--writer-rank", "1", "--steps", "60",
                         "--seed", "5", "--time-limit", "120")
    assert summary["errors"] == [] and summary["ok"] is True
    steps = summary["steps"]
    assert isinstance(steps, dict) and sum(steps.values()) == 60
    assert all(v > 0 for v in steps.values()), steps


@pytest.mark.stress
@pytest.mark.gpu
@pytest.mark.timeout(180)
def test_nccl_mixed_round_trips_or_clean_skip() -> None:
    summary = run_stress("nccl", "--steps", "60", "--seed", "6", "--time-limit", "120")
    assert summary["ok"] is True and summary["errors"] == []
    if "skipped" in summary:
        pytest.skip(str(summary["skipped"]))
    steps = summary["steps"]
    assert isinstance(steps, dict) and sum(steps.values()) == 60
