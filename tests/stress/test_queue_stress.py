"""Bounded runs of the MessageQueue harness (``python -m stress queue``)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from support.stress_cli import run_stress
from support.stress_plan import PLAN, checked

from stress.queue import make_object


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
    seconds = summary["seconds"]
    assert isinstance(seconds, float)
    report_checked(label, checked(label), readers + 1, seconds)


@pytest.mark.stress
@pytest.mark.parametrize(
    "label,readers,remote",
    [("queue streamed runs, 3 local, objects > ring", 3, 0),
     ("queue streamed runs, 2 local + 1 remote", 2, 1)],
    ids=["stream-3-local", "stream-2-local-1-remote"],
)
def test_exact_delivery_of_runs_larger_than_the_ring(label: str, readers: int, remote: int,
                                                      report_checked: Any) -> None:
    """``large_objects="stream"`` over an 80 KiB ring (2 chunks of 40 KiB): about one
    object in seven is larger than the whole ring (up to 300 KB), so it only gets
    through while the readers consume its first chunks."""
    objects = PLAN[label][2]
    larger = sum(_size(make_object(readers * 53, k)) > 2 * 40 * 1024 for k in range(objects))
    assert larger > objects // 10
    summary = run_stress(
        "queue",
        "--readers", str(readers),
        "--remote", str(remote),
        "--objects", str(objects),
        "--max-chunk-bytes", str(40 * 1024),
        "--max-chunks", "2",
        "--large-objects", "stream",
        "--seed", str(readers * 53),
    )  # fmt: skip
    assert summary["ok"], summary["errors"]
    assert summary["sent"] == objects
    received = summary["received"]
    assert isinstance(received, dict) and len(received) == readers + remote == PLAN[label][1]
    assert set(received.values()) == {objects}
    assert summary["segment_left"] is False
    seconds = summary["seconds"]
    assert isinstance(seconds, float)
    report_checked(label, checked(label), readers + remote, seconds)


def _size(obj: Any) -> int:
    return len(pickle.dumps(obj, protocol=5))
