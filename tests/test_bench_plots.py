"""bench/plots.py: the PNGs drawn from the bench JSON files in a directory, by name, each
a non-empty PNG; a plot whose JSON is absent is not drawn; the ratio labels and the
met / short colours of the figures against their targets, exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.bench_json import IDLE, PER_OP, bench_fixture

from bench import plots, readme

colors = pytest.importorskip("matplotlib.colors")

BENCH_PNGS = ["roundtrip_vs_size.png", "throughput_vs_readers.png", "large_objects.png",
              "idle_wakeup.png"]
ALL_PNGS = [*BENCH_PNGS, "idle_first_message.png", "idle_reader_cpu.png", "per_op_cpu.png",
            "ratios_vs_targets.png"]


def _bench() -> dict[str, Any]:
    """bench.json with report's idle wake-up section too (:mod:`bench.idle_wakeup`)."""
    bench = bench_fixture()
    bench["idle"] = {"idle": 10.0,
                     "futex": {"cpu": 0.01, "late": {"0.01": [50.0, 70.0], "1.0": [80.0]}},
                     "doubling": {"cpu": 2.5, "late": {"0.01": [900.0], "1.0": [4000.0]}}}
    return bench


def _write(out: Path, **files: dict[str, Any]) -> None:
    for name, data in files.items():
        (out / f"{name}.json").write_text(json.dumps(data))


@pytest.fixture(autouse=True)
def _small(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(plots, "DPI", 30)  # the same plots, drawn fast
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _assert_pngs(made: list[Path], out: Path, names: list[str]) -> None:
    assert made == [out / n for n in names]
    assert sorted(p.name for p in out.glob("*.png")) == sorted(names)
    for p in made:
        head = p.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n", p
        assert p.stat().st_size > 1000, p


def test_every_plot_is_drawn_from_the_three_json_files(tmp_path: Path) -> None:
    _write(tmp_path, bench=_bench(), idle=IDLE, per_op=PER_OP)
    _assert_pngs(plots.draw(tmp_path), tmp_path, ALL_PNGS)


def test_only_the_plots_of_the_json_present_are_drawn(tmp_path: Path) -> None:
    assert plots.draw(tmp_path) == []
    _write(tmp_path, idle=IDLE)
    _assert_pngs(plots.draw(tmp_path), tmp_path, ["idle_first_message.png",
                                                  "idle_reader_cpu.png"])
    _write(tmp_path, bench=_bench())
    _assert_pngs(plots.draw(tmp_path), tmp_path,
                 [*BENCH_PNGS, "idle_first_message.png", "idle_reader_cpu.png",
                  "ratios_vs_targets.png"])


def _labels(fig: Any) -> list[str]:
    assert fig is not None
    return [t.get_text() for t in fig.axes[0].texts]


def test_the_figures_against_their_targets_each_labelled_and_coloured() -> None:
    fig = plots.ratios_vs_targets(readme.targets(_bench(), PER_OP, IDLE))
    # in the table's order: 1 KiB round trip / vLLM, / floor; streamed / vLLM; 2 / 3 readers
    # / floor; CPU / pickle; first message after 10 ms / 1 s / C futex; idle CPU; 2 MiB /
    # vLLM; 64 MiB GB/s, / memcpy, / vLLM (no targets)
    assert _labels(fig) == ["0.25x", "2.0x", "3.0x", "2.0x", "3.0x", "2.5x", "1.5x", "3.0x",
                            "0.005 % of a core", "0.25x", "2.50 GB/s", "0.50x", "10x"]
    assert fig is not None
    met, short, none = (colors.to_rgba(c) for c in (plots.MET, plots.SHORT, plots.NO_TARGET))
    assert [p.get_facecolor() for p in fig.axes[0].patches] == [
        met, met, met, met, short, met, met, met, met, short, met, none, none]
    from matplotlib.collections import LineCollection

    bounds = [seg[0][1] for c in fig.axes[0].collections if isinstance(c, LineCollection)
              for seg in c.get_segments()]
    assert bounds == [0.33, 2.5, 3, 2.5, 2.5, 3, 3, 3, 0.01, 0.09, 2]


def test_first_message_bars_carry_their_ratio_to_the_c_futex_floor() -> None:
    fig = plots.idle_first_message(IDLE)
    # verifiedring 60 / 40, 150 / 50; vLLM 0.9 500 / 40, 700 / 50; the floor itself
    assert _labels(fig) == ["1.5x", "3.0x", "12x", "14x", "1.0x", "1.0x"]


def test_per_op_bars_carry_their_ratio_to_pickle() -> None:
    fig = plots.per_op_cpu(PER_OP)
    assert _labels(fig) == ["2.5x", "20x", "1.0x"]
    assert fig is not None
    from matplotlib.patches import Rectangle

    bars = [p for p in fig.axes[0].patches if isinstance(p, Rectangle)]
    assert [p.get_height() for p in bars] == [1.0, 8.0, 0.4]
