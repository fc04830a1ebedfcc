"""plots: the PNGs of ``bench/results``, drawn from its JSON files; it measures nothing.

``python -m bench plots [--results DIR]`` (``make bench`` runs it after the benches
and before ``readme``) reads ``DIR/bench.json`` (:mod:`bench.report`), ``idle.json``
(:mod:`bench.idle_anchors`) and ``per_op.json`` (:mod:`bench.per_op`), each optional,
and writes into ``DIR`` the PNGs of the figures they hold:

* ``bench.json``: ``roundtrip_vs_size.png``, ``throughput_vs_readers.png``,
  ``large_objects.png``, ``idle_wakeup.png``;
* ``idle.json``: ``idle_first_message.png`` (per gap, each queue beside the C futex
  floor, each bar labelled with its ratio to it) and ``idle_reader_cpu.png`` (per
  queue, with the target line);
* ``per_op.json``: ``per_op_cpu.png`` (per queue beside pickle alone, labelled with
  the ratio to pickle, with the target line);
* all of them (``cadence.json`` of :mod:`bench.cadence` too): ``ratios_vs_targets.png``,
  every figure of the README's table that
  :func:`bench.readme.targets` gives: a bar per ratio (per column of its row), met
  or short coloured against its target, grey without one.

Without matplotlib (``pip install -e '.[bench]'``) it draws nothing and says so.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import readme

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Json = dict[str, Any]
DPI = 110
MET, SHORT, NO_TARGET = "tab:green", "tab:red", "tab:gray"
FLOOR_COLOUR = "black"
FLOOR = "C futex floor"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", default="bench/results",
                        help="directory of the JSON files, and of the PNGs written")


def _axes(width: float = 7, height: float = 4.5) -> tuple[Figure, Axes]:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    return fig, ax


def _log_range(values: list[float]) -> tuple[float, float]:
    """A log y axis's limits for bars of ``values`` (zeros included: drawn at the
    bottom): a decade under the least positive one, room for labels over the top."""
    positive = [v for v in values if v > 0] or [1.0]
    return min(positive) / 10, max(positive) * 4


# --- bench.json -------------------------------------------------------------------------


def roundtrip_vs_size(bench: Json) -> Figure | None:
    one = [r for r in bench.get("roundtrip") or [] if r["readers"] == 1]
    if not one:
        return None
    fig, ax = _axes()
    for t in sorted({r["transport"] for r in one}):
        pts = sorted((r["size"], r["p50_us"]) for r in one if r["transport"] == t)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=t)
    ax.set(xscale="log", yscale="log", xlabel="payload (bytes)", ylabel="round trip p50 (µs)",
           title="Round trip vs payload, 1 reader")
    ax.legend()
    return fig


def throughput_vs_readers(bench: Json) -> Figure | None:
    rows = bench.get("stream") or []
    if not rows:
        return None
    fig, ax = _axes()
    for t in sorted({r["transport"] for r in rows}):
        pts = sorted((r["readers"], r["msgs_per_s"]) for r in rows if r["transport"] == t)
        ax.plot([p[0] for p in pts], [p[1] / 1000 for p in pts], marker="o", label=t)
    ax.set(xlabel="readers", ylabel="thousand 1 KiB messages/s per reader",
           title="Streaming throughput vs readers",
           xticks=sorted({r["readers"] for r in rows}))
    ax.legend()
    return fig


def large_objects(bench: Json) -> Figure | None:
    large = bench.get("large") or []
    if not large:
        return None
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (n, key, label) in zip(axes, (
        (1, "p50_us", "2 MiB object round trip p50 (µs)"),
        (3, "gb_per_s_per_reader", "64 MiB object to 3 readers (GB/s per reader)"),
    ), strict=True):
        rows = [r for r in large if r["readers"] == n]
        ax.bar([r["transport"] for r in rows], [r[key] for r in rows])
        ax.set(ylabel=label, title=label.split(" (")[0])
        ax.tick_params(axis="x", labelrotation=15)
    return fig


def idle_wakeup(bench: Json) -> Figure | None:
    methods = {m: res for m, res in (bench.get("idle") or {}).items() if isinstance(res, dict)}
    if not methods:
        return None
    fig, ax = _axes()
    for method, res in methods.items():
        pts = sorted((float(g), statistics.median(xs)) for g, xs in res["late"].items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                label=f"{method} (idle CPU {res['cpu']:.2f}%)")
    ax.set(xscale="log", xlabel="idle gap (s)", ylabel="first message one-way p50 (µs)",
           title="Wake-up after an idle gap")
    ax.legend()
    return fig


# --- idle.json ----------------------------------------------------------------------------


def idle_first_message(idle: Json) -> Figure | None:
    queues = {q: r.get("first_message_us") or {} for q, r in (idle.get("queues") or {}).items()}
    floor = idle.get("c_futex_floor_us") or {}
    gaps = sorted({g for got in [*queues.values(), floor] for g in got}, key=float)
    if not gaps:
        return None
    series = [(name, got) for name, got in [*queues.items(), (FLOOR, floor)] if got]
    width = 0.8 / len(series)
    fig, ax = _axes(max(7.0, 0.5 * len(gaps) * len(series)))
    heights: list[float] = []
    for i, (name, got) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j, g in enumerate(gaps) if g in got]
        p50 = [got[g]["p50"] for g in gaps if g in got]
        p90 = [got[g]["p90"] for g in gaps if g in got]
        heights += p50 + p90
        bars = ax.bar(xs, p50, width, label=name, yerr=[[0] * len(p50),
                      [max(b - a, 0) for a, b in zip(p50, p90, strict=True)]],
                      color=FLOOR_COLOUR if name == FLOOR else None, capsize=2)
        ratios = [readme.ratio_of(got[g]["p50"], (floor.get(g) or {}).get("p50"))
                  for g in gaps if g in got]
        ax.bar_label(bars, labels=["" if r is None else readme.times(r) for r in ratios],
                     fontsize=7, padding=2)
    ax.set(yscale="log", ylim=_log_range(heights))
    ax.set_xticks(range(len(gaps)), [readme.gap_label(g) for g in gaps])
    ax.set(xlabel="idle gap", ylabel="first message one-way (µs): p50 bar, p90 whisker",
           title=f"First message after idle, {idle.get('readers', '?')} readers "
                 "(labels: ratio to the C futex floor)")
    ax.legend(fontsize=8)
    return fig


def idle_reader_cpu(idle: Json) -> Figure | None:
    cpu = {q: r["idle_cpu_percent"] for q, r in (idle.get("queues") or {}).items()
           if r.get("idle_cpu_percent") is not None}
    if not cpu:
        return None
    fig, ax = _axes()
    bottom, top = _log_range([*cpu.values(), 0.01])
    bars = ax.bar(list(cpu), [max(x, bottom) for x in cpu.values()])
    ax.set(yscale="log", ylim=(bottom, top))
    ax.bar_label(bars, labels=[f"{x:.3g} %" for x in cpu.values()], padding=2)
    ax.axhline(0.01, color=MET, linestyle="--", label="target: <= 0.01 %")
    window = idle.get("idle_window_s")
    when = f", {window[0]:g}-{window[1]:g} s after the last message" if window else ""
    ax.set(ylabel="idle reader CPU (% of a core)", title=f"Idle reader CPU{when}")
    ax.legend()
    return fig


# --- per_op.json ------------------------------------------------------------------------


def per_op_cpu(per_op: Json) -> Figure | None:
    cpu = per_op.get("cpu_ns_per_pair") or {}
    if "pickle" not in cpu:
        return None
    sides = [s for s in cpu if s != "pickle"] + ["pickle"]
    fig, ax = _axes()
    bars = ax.bar(sides, [cpu[s]["median_ns"] / 1000 for s in sides],
                  color=[FLOOR_COLOUR if s == "pickle" else "tab:blue" for s in sides])
    ax.bar_label(bars, labels=[readme.times(cpu[s]["ratio_to_pickle"]) for s in sides],
                 padding=2)
    ax.axhline(3 * cpu["pickle"]["median_ns"] / 1000, color=MET, linestyle="--",
               label="target: <= 3x pickle")
    ax.set(ylabel="CPU per enqueue + dequeue (µs)",
           title=f"CPU per enqueue + dequeue of {per_op.get('size', '?')} B, one process "
                 "(labels: ratio to pickle)")
    ax.legend()
    return fig


# --- all three ------------------------------------------------------------------------


def ratios_vs_targets(targets: list[readme.Target]) -> Figure | None:
    bars = [(t, col, v) for t in targets for col, v in t.figures if v is not None]
    if not bars:
        return None
    fig, ax = _axes(max(7.0, 0.55 * len(bars)), 5.5)
    colours = [NO_TARGET if t.bound is None else MET if t.met(v) else SHORT for t, _, v in bars]
    drawn = ax.bar(range(len(bars)), [v for _, _, v in bars], color=colours, log=True)
    ax.bar_label(drawn, labels=[t.fmt(v) for t, _, v in bars], fontsize=7, padding=2)
    for x, (t, _, _) in enumerate(bars):
        if t.bound is not None:
            ax.hlines(t.bound, x - 0.45, x + 0.45, color="black", linewidth=2)
    ax.set_xticks(range(len(bars)), [f"{t.what}{', ' + col if col else ''}"
                                     + (f"\n{t.label}" if t.label else "")
                                     for t, col, _ in bars],
                  rotation=60, ha="right", fontsize=7)
    import matplotlib.patches as mpatches

    ax.legend(handles=[mpatches.Patch(color=MET, label="target met"),
                       mpatches.Patch(color=SHORT, label="target short"),
                       mpatches.Patch(color=NO_TARGET, label="no target"),
                       mpatches.Patch(color="black", label="the target")], fontsize=8)
    ax.set(ylabel="measured (a ratio, or the unit its label gives)",
           title="The README table's figures against their targets")
    return fig


def figures(bench: Json | None, idle: Json | None, per_op: Json | None,
            cadence: Json | None = None) -> dict[str, Callable[[], Figure | None]]:
    """The PNGs' names and how to draw each, for the JSON files given."""
    out: dict[str, Callable[[], Figure | None]] = {}
    for data, plots in ((bench, (roundtrip_vs_size, throughput_vs_readers, large_objects,
                                 idle_wakeup)),
                        (idle, (idle_first_message, idle_reader_cpu)), (per_op, (per_op_cpu,))):
        if data is not None:
            for fn in plots:
                out[f"{fn.__name__}.png"] = partial(fn, data)
    if bench is not None:
        out["ratios_vs_targets.png"] = partial(ratios_vs_targets,
                                               readme.targets(bench, per_op, idle, cadence))
    return out


def draw(results: Path) -> list[Path]:
    """The PNGs into ``results`` from the JSON files there (a plot without its figures
    is not drawn); none, and a line saying why, without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print("no plots: matplotlib is not installed (pip install -e '.[bench]')")
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bench, idle, per_op, cadence = (readme.load_json(results / f"{n}.json")
                                    for n in ("bench", "idle", "per_op", "cadence"))
    made = []
    for name, draw_one in figures(bench, idle, per_op, cadence).items():
        fig = draw_one()
        if fig is not None:
            made.append(results / name)
            fig.savefig(made[-1], dpi=DPI, bbox_inches="tight")
            plt.close(fig)
    return made


def main(args: argparse.Namespace) -> int:
    for path in draw(Path(args.results)):
        print(f"wrote {path}")
    return 0
