"""bench/cadence.py: a short run's JSON, every cell and side of it."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from bench import cadence


def test_a_short_run_of_verifiedring_and_the_c_floor_writes_the_documented_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERIFIEDRING_BENCH_CACHE", str(tmp_path / "cache"))
    parser = argparse.ArgumentParser()
    cadence.add_arguments(parser)
    args = parser.parse_args(["--out", str(tmp_path), "--sides", "verifiedring", "c-futex",
                              "--seconds", "0.2", "--repeats", "1"])
    assert cadence.main(args) == 0
    report = json.loads((tmp_path / "cadence.json").read_text())
    assert sorted(report) == ["cells", "machine", "payload_bytes", "repeats", "seconds", "seed",
                              "skipped"]
    assert (report["payload_bytes"], report["seconds"], report["repeats"]) == (1024, 0.2, 1)
    assert list(report["cells"]) == ["10 ms, R=1", "10 ms, R=2", "2 ms, R=1", "2 ms, R=2"]
    floor = shutil.which("cc") is not None
    assert report["skipped"] == ({} if floor else
                                 {"c-futex": "not built: no C compiler (cc) on PATH"})
    for (period, readers), cell in zip(cadence.CELLS, report["cells"].values(), strict=True):
        assert (cell["period_s"], cell["readers"]) == (period, readers)
        assert sorted(cell["sides"]) == [*(["c-futex"] if floor else []), "verifiedring"]
        steps = int(0.2 / period)
        ours = cell["sides"]["verifiedring"]
        assert ours["samples"] == steps * readers  # every step, from every reader
        assert 0 < ours["p50_us"] <= ours["p99_us"]
        assert ours["reader_cpu_percent"] > 0 and ours["writer_cpu_percent"] > 0
        if floor:
            c = cell["sides"]["c-futex"]
            assert c["samples"] == steps * readers
            assert 0 < c["p50_us"] <= c["p99_us"]
            assert "reader_cpu_percent" not in c
