"""Bounded runs of the MessageQueue harness (``python -m stress queue``)."""

from __future__ import annotations

from typing import Any

import pytest
from support.stress_cli import run_stress
from support.stress_plan import PLAN, checked


@pytest.mark.stress
@pytest.mark.parametrize(
    "label,readers,remote_window",
    [("queue 1 local + 1 remote", 1, 64), ("queue 3 local + 1 remote, tight window", 3, 8)],
    ids=["1-local", "3-local-tight-window"],
)
def test_exact_delivery_local_and_remote(label: str, readers: int, remote_window: int,
                                         report_checked: Any) -> None:
    objects = PLAN[label][2]
    summary = run_stress(
        "queue",
        "--readers", str(readers),
        "--remote", "1",
        "--objects", str(objects),
        "--max-chunk-bytes", str(40 * 1024),
        "--max-chunks", "2",
        "--remote-window", str(remote_window),
        "--seed", str(readers * 31),
    )  # fmt: skip
    assert summary["ok"], summary["errors"]
    assert summary["sent"] == objects
    received = summary["received"]
    assert isinstance(received, dict) and len(received) == readers + 1 == PLAN[label][1]
    assert set(received.values()) == {objects}
    assert summary["segment_left"] is False
    report_checked(label, checked(label), readers + 1, float(summary["seconds"]))
