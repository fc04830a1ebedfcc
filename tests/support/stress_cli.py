"""Run the ``stress`` harness the way a user would, and read its JSON summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_stress(kind: str, *args: str, timeout: float = 120) -> dict[str, object]:
    """``python -m stress <kind> --json <args>``; its summary, exit code checked against it."""
    proc = subprocess.run(
        [sys.executable, "-m", "stress", kind, "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        # this tree's package and its stress/ and spec/, whatever else is installed
        env={**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT / "src"), str(ROOT)))},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no summary (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    summary: dict[str, object] = json.loads(lines[-1])
    assert proc.returncode == (0 if summary["ok"] else 1), proc.stderr
    return summary
