"""bench/idle_anchors.py: the quick run's JSON, and the C futex floor it builds."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from bench import anchors, idle_anchors


def _args(out: Path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    idle_anchors.add_arguments(parser)
    return parser.parse_args(["--out", str(out), *extra])


def _check_gaps(by_gap: dict[str, dict[str, float]], samples: dict[str, int]) -> None:
    assert sorted(by_gap) == sorted(samples)
    for gap, summary in by_gap.items():
        assert sorted(summary) == ["p50", "p90", "samples"]
        assert summary["samples"] == samples[gap]
        assert 0 < summary["p50"] <= summary["p90"]


def test_quick_run_of_verifiedring_alone_writes_the_documented_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERIFIEDRING_BENCH_CACHE", str(tmp_path / "cache"))
    args = _args(tmp_path, "--quick", "--queues", "verifiedring", "--idle-after", "0.5",
                 "--idle-window", "1")
    assert idle_anchors.main(args) == 0
    report = json.loads((tmp_path / "idle.json").read_text())
    floor = shutil.which("cc") is not None
    top = {"machine", "readers", "repeats", "gaps_s", "idle_window_s", "queues", "skipped",
           "ratios"} | ({"c_futex_floor_us"} if floor else set())
    assert set(report) == top
    assert report["readers"] == idle_anchors.READERS == 2
    assert report["repeats"] == 2
    assert report["gaps_s"] == [g for g, _ in idle_anchors.QUICK_GAPS] == [0.01, 0.1, 1.0]
    assert report["idle_window_s"] == [0.5, 1.5]
    assert list(report["queues"]) == ["verifiedring"]
    ours = report["queues"]["verifiedring"]
    assert sorted(ours) == ["first_message_us", "idle_cpu_percent",
                            "idle_cpu_percent_per_reader"]
    # every sample of every repeat, from each of the two readers
    per_reader = {f"{g:g}": n * report["repeats"] for g, n in idle_anchors.QUICK_GAPS}
    _check_gaps(ours["first_message_us"], {g: 2 * n for g, n in per_reader.items()})
    assert len(ours["idle_cpu_percent_per_reader"]) == 2
    assert all(x > 0 for x in ours["idle_cpu_percent_per_reader"])
    assert ours["idle_cpu_percent"] == pytest.approx(
        sum(ours["idle_cpu_percent_per_reader"]) / 2)
    if floor:
        waiters = {g: 2 * n for g, n in per_reader.items()}  # as many as the readers
        _check_gaps(report["c_futex_floor_us"], waiters)
        assert report["skipped"] == {}
        ratios = report["ratios"]["verifiedring/c-futex"]
        assert sorted(ratios) == sorted(per_reader)
        assert all(r > 0 for r in ratios.values())
        assert list(report["ratios"]) == ["verifiedring/c-futex"]
    else:
        assert report["skipped"] == {"c-futex": "not built: no C compiler (cc) on PATH"}
        assert report["ratios"] == {}


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")
def test_the_c_floor_compiles_into_the_anchors_cache_and_runs_one_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERIFIEDRING_BENCH_CACHE", str(tmp_path))
    assert anchors.cache_dir() == tmp_path
    exe, state = idle_anchors.build_floor()
    assert state == "built"
    assert exe is not None and exe.parent == tmp_path / "futex_floor"
    assert [p.name for p in exe.parent.iterdir()] == [exe.name]  # no temporary file left
    [(gap, us)] = idle_anchors.run_floor(exe, [0.01])
    assert gap == 0.01
    assert us > 0
    mtime = exe.stat().st_mtime_ns
    assert idle_anchors.build_floor() == (exe, "built")
    assert exe.stat().st_mtime_ns == mtime  # cached: not compiled again


def test_without_a_compiler_the_floor_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert idle_anchors.build_floor(tmp_path) == (None, "not built: no C compiler (cc) on PATH")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")
def test_the_c_floor_wakes_as_many_waiters_as_asked_one_sample_each_per_gap(
    tmp_path: Path
) -> None:
    exe, state = idle_anchors.build_floor(tmp_path)
    assert state == "built" and exe is not None
    got = idle_anchors.run_floor(exe, [0.01, 0.002, 0.005], waiters=3)
    assert [g for g, _ in got] == [0.01] * 3 + [0.002] * 3 + [0.005] * 3
    assert all(us > 0 for _, us in got)
