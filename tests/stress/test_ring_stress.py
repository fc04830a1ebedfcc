"""Bounded runs of the multiprocess ring harness (``python -m stress ring``)."""

from __future__ import annotations

import pytest
from support.stress_cli import run_stress

MESSAGES = 3000


@pytest.mark.stress
@pytest.mark.parametrize("readers", [1, 2, 3])
def test_exact_delivery_with_wrapping(readers: int, shm_segments: object) -> None:
    summary = run_stress(
        "ring",
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
        "ring",
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
