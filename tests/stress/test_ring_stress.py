"""Bounded runs of the multiprocess ring harness (``python -m stress ring``)."""

from __future__ import annotations

from typing import Any

import pytest
from support.stress_cli import run_stress
from support.stress_plan import PLAN, checked


def _check(label: str, summary: dict[str, Any], shm_segments: Any, report: Any) -> None:
    shm_segments.track(str(summary["segment"]))
    _, readers, each = PLAN[label]
    assert summary["errors"] == []
    assert summary["ok"] is True
    assert summary["sent"] == each
    assert summary["received"] == [each] * readers
    assert summary["segment_left"] is False
    report(label, checked(label), readers, float(summary["seconds"]))


@pytest.mark.stress
@pytest.mark.parametrize("readers", [1, 2, 3])
def test_exact_delivery_with_wrapping(readers: int, shm_segments: Any,
                                      report_checked: Any) -> None:
    label = f"ring wrapping, {readers} reader{'s' if readers > 1 else ''}"
    summary = run_stress(
        "ring",
        "--readers", str(readers),
        "--messages", str(PLAN[label][2]),
        "--max-chunk-bytes", "48",
        "--max-chunks", "2",
        "--seed", str(100 + readers),
        "--pause-prob", "0.02",
        "--stall-timeout", "15",
        "--time-limit", "60",
    )  # fmt: skip
    _check(label, summary, shm_segments, report_checked)


@pytest.mark.stress
def test_one_chunk_ring_and_full_size_messages(shm_segments: Any, report_checked: Any) -> None:
    label = "ring one chunk"
    summary = run_stress(
        "ring",
        "--readers", "2",
        "--messages", str(PLAN[label][2]),
        "--max-chunk-bytes", "12",  # header only: every payload is empty
        "--max-chunks", "1",
        "--seed", "7",
        "--time-limit", "60",
    )  # fmt: skip
    _check(label, summary, shm_segments, report_checked)


@pytest.mark.stress
def test_bulk_every_message_checked(shm_segments: Any, report_checked: Any) -> None:
    """Most of the CI's million: three readers, every byte, order and count checked."""
    label = "ring bulk"
    summary = run_stress(
        "ring",
        "--readers", "3",
        "--messages", str(PLAN[label][2]),
        "--max-chunk-bytes", "64",
        "--max-chunks", "16",
        "--seed", "11",
        "--pause-prob", "0.0005",
        "--stall-timeout", "30",
        "--time-limit", "150",
        timeout=170,
    )  # fmt: skip
    _check(label, summary, shm_segments, report_checked)
