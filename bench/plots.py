"""plots: the PNGs of ``bench/results`` drawn from the report's dict (matplotlib)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any


def plot(report: dict[str, Any], out: Path) -> list[Path]:
    """The PNGs (matplotlib: ``pip install -e '.[bench]'``); none without it."""
    try:
        import matplotlib
    except ImportError:
        print("no plots: matplotlib is not installed (pip install -e '.[bench]')")
        return []

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    one = [r for r in report["roundtrip"] if r["readers"] == 1]
    for t in sorted({r["transport"] for r in one}):
        pts = sorted((r["size"], r["p50_us"]) for r in one if r["transport"] == t)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=t)
    ax.set(xscale="log", yscale="log", xlabel="payload (bytes)", ylabel="round trip p50 (µs)",
           title="Round trip vs payload, 1 reader")
    ax.legend()
    made.append(out / "roundtrip_vs_size.png")
    fig.savefig(made[-1], dpi=110, bbox_inches="tight")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for t in sorted({r["transport"] for r in report["stream"]}):
        pts = sorted((r["readers"], r["msgs_per_s"]) for r in report["stream"]
                     if r["transport"] == t)
        ax.plot([p[0] for p in pts], [p[1] / 1000 for p in pts], marker="o", label=t)
    ax.set(xlabel="readers", ylabel="thousand 1 KiB messages/s per reader",
           title="Streaming throughput vs readers", xticks=[1, 2, 3])
    ax.legend()
    made.append(out / "throughput_vs_readers.png")
    fig.savefig(made[-1], dpi=110, bbox_inches="tight")
    large = report.get("large") or []
    if large:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, (n, key, label) in zip(axes, (
            (1, "p50_us", "2 MiB object round trip p50 (µs)"),
            (3, "gb_per_s_per_reader", "64 MiB object to 3 readers (GB/s per reader)"),
        ), strict=True):
            rows = [r for r in large if r["readers"] == n]
            ax.bar([r["transport"] for r in rows], [r[key] for r in rows])
            ax.set(ylabel=label, title=label.split(" (")[0])
            ax.tick_params(axis="x", labelrotation=15)
        made.append(out / "large_objects.png")
        fig.savefig(made[-1], dpi=110, bbox_inches="tight")
    idle = report.get("idle")
    if idle:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for method, res in idle.items():
            if not isinstance(res, dict):
                continue
            pts = sorted((float(g), statistics.median(xs)) for g, xs in res["late"].items())
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    label=f"{method} (idle CPU {res['cpu']:.2f}%)")
        ax.set(xscale="log", xlabel="idle gap (s)", ylabel="first message one-way p50 (µs)",
               title="Wake-up after an idle gap")
        ax.legend()
        made.append(out / "idle_wakeup.png")
        fig.savefig(made[-1], dpi=110, bbox_inches="tight")
    plt.close("all")
    return made
