"""Bounded runs of the MessageQueue harness (``python -m stress queue``)."""

from __future__ import annotations

import pytest
from support.stress_cli import run_stress

OBJECTS = 2000  # the standalone default is 10,000; this keeps each run well under 60 s


@pytest.mark.stress
@pytest.mark.parametrize(
    "readers,remote_window", [(1, 64), (3, 8)], ids=["1-local", "3-local-tight-window"]
)
def test_exact_delivery_local_and_remote(readers: int, remote_window: int) -> None:
    summary = run_stress(
        "queue",
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
