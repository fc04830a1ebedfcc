"""Bounded runs of ``python -m stress gloo`` and ``python -m stress nccl``."""

from __future__ import annotations

from typing import Any

import pytest
from support.stress_cli import run_stress
from support.stress_plan import PLAN, checked


@pytest.mark.stress
@pytest.mark.timeout(180)
def test_gloo_mixed_round_trips(report_checked: Any) -> None:
    label = "gloo 2 ranks"
    _, readers, n_steps = PLAN[label]
    summary = run_stress("gloo", "--world-size", "2", "--writer-rank", "1", "--steps",
                         str(n_steps), "--seed", "5", "--time-limit", "120", timeout=150)
    assert summary["errors"] == [] and summary["ok"] is True
    steps = summary["steps"]
    assert isinstance(steps, dict) and sum(steps.values()) == n_steps
    assert all(v > 0 for v in steps.values()), steps
    # each step's payload is checked by the rank(s) that did not send it
    seconds = summary["seconds"]
    assert isinstance(seconds, float)
    report_checked(label, checked(label), readers, seconds)


@pytest.mark.stress
@pytest.mark.gpu
@pytest.mark.timeout(180)
def test_nccl_mixed_round_trips_or_clean_skip() -> None:
    summary = run_stress("nccl", "--steps", "60", "--seed", "6", "--time-limit", "120", timeout=150)
    assert summary["ok"] is True and summary["errors"] == []
    if "skipped" in summary:
        pytest.skip(str(summary["skipped"]))
    steps = summary["steps"]
    assert isinstance(steps, dict) and sum(steps.values()) == 60
