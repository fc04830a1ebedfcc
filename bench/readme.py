"""readme: the README's results table, written from the JSON of the last bench run.

``python -m bench readme`` reads ``<results>/bench.json`` (:mod:`bench.report`),
``<results>/per_op.json`` (:mod:`bench.per_op`), ``<results>/idle.json`` (the idle
bench: ``{"queues": {name: {"first_message_us": {gap: {"p50", "p90"}},
"idle_cpu_percent": x}}, "c_futex_floor_us": {gap: {"p50", "p90"}}, "readers": n,
"idle_window_s": [a, b]}``, :mod:`bench.idle_anchors`) and ``<results>/cadence.json``
(:mod:`bench.cadence`: a step every T to R readers), each optional but ``bench.json``,
and rewrites the lines between the README's ``bench-results`` markers (the marker lines
and everything outside them are kept verbatim). The first line says the machine and its
load; then one row per figure of issues 20 and 31, columns what | verifiedring | vLLM
0.9 | vLLM 0.33 | floor | ratio | target, the target marked met or short. A row whose
figures are not in the JSON is left out. "vLLM" in a ratio is the faster of the anchors in that row.

Each row also carries its figures as :class:`Target` objects (:func:`targets`: each
ratio of the table, or the figure its target bounds, with the target if it has one),
from which :mod:`bench.plots` draws the ratios against their targets.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START = "<!-- bench-results:start"
END = "<!-- bench-results:end"
VR, V09, V033 = "verifiedring", "vllm-0.9.0", "vllm-0.33.0"
ANCHORS = (V09, V033)
HEADER = ["what", "verifiedring", "vLLM 0.9", "vLLM 0.33", "floor", "ratio", "target"]
KIB = 1024
Cells = list[str]
#: The rows' order, by the start of their first cell: issue 20's rows, then the others.
ORDER = ("1 KiB round trip, 1 reader", "1 KiB streamed, 1 reader", "1 KiB round trip, 2 / 3",
         "CPU per enqueue", "first message after", "idle reader CPU", "a 1 KiB step every 10",
         "a 1 KiB step every 2", "2 MiB object",
         "64 MiB object", "64 KiB / 1 MiB", "1 KiB streamed, 2 / 3", "remote reader")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", default="bench/results", help="directory of the JSON")
    parser.add_argument("--readme", default="README.md", help="the file to rewrite")


# --- figures as text ----------------------------------------------------------------


def _sig3(x: float) -> str:
    """Three significant figures, trailing zeros kept: ``4.78``, ``23.0``, ``222``."""
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def us(x: float) -> str:
    """``24.6 µs``, ``122 µs``, ``1.07 ms``."""
    return f"{_sig3(x / 1000)} ms" if x >= 1000 else f"{_sig3(x)} µs"


def times(r: float) -> str:
    """A ratio: ``0.26x``, ``2.4x``, ``12x``."""
    return f"{r:.2f}x" if r < 1 else f"{r:.1f}x" if r < 10 else f"{r:.0f}x"


def rate(x: float) -> str:
    return f"{x / 1000:.0f}k msg/s"


def gbs(x: float) -> str:
    return f"{x:.2f} GB/s"


def gap_label(gap: str) -> str:
    """An idle gap in seconds as the row names it: ``10 ms``, ``0.1 s``, ``3 s``."""
    g = float(gap)
    return f"{g * 1000:g} ms" if g < 0.1 else f"{g:g} s"


def joined(values: list[float | None], fmt: Callable[[float], str], unit: str = "") -> str:
    """``a / b unit`` (the unit once, at the end, when every part has it; else each
    part its own: ``412 µs / 1.34 ms``); empty if any value is missing."""
    if not values or any(v is None for v in values):
        return ""
    parts = [fmt(v) for v in values if v is not None]
    if unit and all(p.endswith(unit) for p in parts):
        return " / ".join(p.removesuffix(unit) for p in parts) + unit
    return " / ".join(parts)


# --- lookups --------------------------------------------------------------------------


def _find(rows: list[dict[str, Any]], transport: str, n: int, size: int | None = None
          ) -> dict[str, Any] | None:
    for r in rows:
        if r["transport"] == transport and r["readers"] == n and r.get("size") == size:
            return r
    return None


def _get(rows: list[dict[str, Any]], key: str, transport: str, n: int,
         size: int | None = None) -> float | None:
    row = _find(rows, transport, n, size)
    return None if row is None else float(row[key])


def _best(values: list[float | None], lower: bool) -> float | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return min(present) if lower else max(present)


def ratio_of(a: float | None, b: float | None) -> float | None:
    """``a / b``; None if either is missing (or ``b`` is zero)."""
    return None if a is None or not b else a / b


Figures = tuple[tuple[str, float | None], ...]


def one(value: float | None) -> Figures:
    """The figures of a row with one column."""
    return (("", value),)


@dataclass(frozen=True)
class Target:
    """Figures of a row (``(column, value)``: ``("2 readers", 2.0)``; the column empty
    for a row of one) and the target ``label`` (``<= 2.5x floor``) they meet when
    each is at most (``at_most``) or at least ``bound``; no bound: a ratio the table
    shows without a target. ``what`` names them in a plot; ``fmt`` writes a value."""

    what: str
    figures: Figures
    bound: float | None = None
    label: str = ""
    at_most: bool = True
    fmt: Callable[[float], str] = times

    def met(self, value: float | None) -> bool | None:
        """Whether ``value`` meets the target; None without a value or a bound."""
        if value is None or self.bound is None:
            return None
        return value <= self.bound if self.at_most else value >= self.bound

    @property
    def ok(self) -> bool | None:
        """Every figure meets the target; None if one is missing (or no bound)."""
        found = [self.met(v) for _, v in self.figures]
        return None if not found or None in found else all(found)

    def cell(self) -> str:
        """``label: met`` / ``label: short``; ``label: no figure`` without one."""
        ok = self.ok
        return f"{self.label}: {'no figure' if ok is None else 'met' if ok else 'short'}"


@dataclass(frozen=True)
class Row:
    """A row of the table: its cells but the last, and its figures; the last cell
    states the targets among them."""

    cells: Cells
    figures: tuple[Target, ...] = ()

    def all_cells(self) -> Cells:
        return [*self.cells, "; ".join(t.cell() for t in self.figures if t.label)]


# --- rows -------------------------------------------------------------------------------


def roundtrip_rows(bench: dict[str, Any]) -> list[Row]:
    rows = bench.get("roundtrip") or []
    out: list[Row] = []

    def p50(t: str, n: int = 1, size: int = KIB) -> float | None:
        return _get(rows, "p50_us", t, n, size)

    vr, anchors, floor = p50(VR), [p50(a) for a in ANCHORS], p50("floor")
    if vr is not None:
        to_v, to_f = ratio_of(vr, _best(anchors, True)), ratio_of(vr, floor)
        ratio = ", ".join(f"{times(r)} {what}" for r, what in ((to_v, "vLLM"), (to_f, "floor"))
                          if r is not None)
        out.append(Row(["1 KiB round trip, 1 reader (p50)", us(vr), *(us(a) if a else "" for a
                        in anchors), us(floor) if floor else "", ratio],
                       (Target("1 KiB round trip / vLLM", one(to_v), 0.33, "<= 0.33x vLLM"),
                        Target("1 KiB round trip / floor", one(to_f), 2.5, "<= 2.5x floor"))))
    vrs, floors = [p50(VR, n) for n in (2, 3)], [p50("floor", n) for n in (2, 3)]
    if all(v is not None for v in vrs):
        rs = [ratio_of(v, f) for v, f in zip(vrs, floors, strict=True)]
        t = Target("1 KiB round trip / floor", tuple(zip(("2 readers", "3 readers"), rs,
                   strict=True)), 2.5, "<= 2.5x floor")
        out.append(Row(["1 KiB round trip, 2 / 3 readers (p50)", joined(vrs, us, " µs"),
                        *(joined([p50(a, n) for n in (2, 3)], us, " µs") for a in ANCHORS),
                        joined(floors, us, " µs"), joined(rs, times) + " floor"
                        if t.ok is not None else ""], (t,)))
    big = [p50(VR, 1, s) for s in (64 * KIB, KIB * KIB)]
    if all(v is not None for v in big):
        best = [_best([p50(a, 1, s) for a in ANCHORS], True) for s in (64 * KIB, KIB * KIB)]
        rs = [ratio_of(v, b) for v, b in zip(big, best, strict=True)]
        out.append(Row(["64 KiB / 1 MiB round trip, in the ring (p50)", joined(big, us, " µs"),
                        *(joined([p50(a, 1, s) for s in (64 * KIB, KIB * KIB)], us, " µs")
                          for a in ANCHORS),
                        joined([p50("floor", 1, s) for s in (64 * KIB, KIB * KIB)], us, " µs"),
                        joined(rs, times) + " vLLM" if None not in rs else ""],
                       (Target("round trip / vLLM", tuple(zip(("64 KiB", "1 MiB"), rs,
                               strict=True))),)))
    remote = p50("verifiedring-remote")
    if remote is not None:
        out.append(Row(["remote reader (CurveZMQ over loopback), 1 KiB round trip (p50)",
                        us(remote), "", "", "", ""]))
    return out


def stream_rows(bench: dict[str, Any]) -> list[Row]:
    rows = bench.get("stream") or []
    out: list[Row] = []

    def mps(t: str, n: int) -> float | None:
        return _get(rows, "msgs_per_s", t, n)

    vr = mps(VR, 1)
    if vr is not None:
        anchors, floor = [mps(a, 1) for a in ANCHORS], mps("floor", 1)
        to_v = ratio_of(vr, _best(anchors, False))
        out.append(Row(["1 KiB streamed, 1 reader", rate(vr), *(rate(a) if a else "" for a in
                        anchors), rate(floor) if floor else "",
                        f"{times(to_v)} vLLM" if to_v is not None else ""],
                       (Target("1 KiB streamed / vLLM", one(to_v), 3, ">= 3x vLLM",
                               at_most=False),)))
    more = [mps(VR, n) for n in (2, 3)]
    if all(v is not None for v in more):
        best = [_best([mps(a, n) for a in ANCHORS], False) for n in (2, 3)]
        rs = [ratio_of(v, b) for v, b in zip(more, best, strict=True)]
        out.append(Row(["1 KiB streamed, 2 / 3 readers", joined(more, rate, " msg/s"),
                        *(joined([mps(a, n) for n in (2, 3)], rate, " msg/s") for a in ANCHORS),
                        joined([mps("floor", n) for n in (2, 3)], rate, " msg/s"),
                        joined(rs, times) + " vLLM" if None not in rs else ""],
                       (Target("1 KiB streamed / vLLM", tuple(zip(("2 readers", "3 readers"),
                               rs, strict=True))),)))
    return out


def per_op_rows(per_op: dict[str, Any] | None) -> list[Row]:
    cpu = (per_op or {}).get("cpu_ns_per_pair") or {}
    if VR not in cpu or "pickle" not in cpu:
        return []
    r = float(cpu[VR]["ratio_to_pickle"])
    steps = cpu.get("verifiedring-python-steps")  # the native step core off
    return [Row(["CPU per enqueue + dequeue, writer and reader in one process (1 KiB)",
                 us(cpu[VR]["median_ns"] / 1000)
                 + (f" (Python steps: {us(steps['median_ns'] / 1000)})" if steps else ""),
                 *(us(cpu[a]["median_ns"] / 1000) if a in cpu else "" for a in ANCHORS),
                 f"pickle alone: {us(cpu['pickle']['median_ns'] / 1000)}", f"{times(r)} pickle"],
                (Target("CPU per enqueue + dequeue / pickle", one(r), 3, "<= 3x pickle"),))]


def cpu_percent(x: float) -> str:
    """An idle reader's CPU: ``0.005 % of a core``."""
    return f"{x:.3g} % of a core"


def idle_rows(idle: dict[str, Any] | None) -> list[Row]:
    queues = (idle or {}).get("queues") or {}
    if VR not in queues:
        return []
    futex = (idle or {}).get("c_futex_floor_us") or {}
    first = queues[VR].get("first_message_us") or {}
    gaps = sorted(first, key=float)
    out: list[Row] = []
    if gaps:
        def p50s(name: str) -> list[float | None]:
            got = (queues.get(name) or {}).get("first_message_us") or {}
            return [got[g]["p50"] if g in got else None for g in gaps]

        floor = [futex[g]["p50"] if g in futex else None for g in gaps]
        rs = [ratio_of(v, f) for v, f in zip(p50s(VR), floor, strict=True)]
        t = Target("first message after idle / C futex", tuple(zip(map(gap_label, gaps), rs,
                   strict=True)), 3, "<= 3x C futex")
        readers = (idle or {}).get("readers", 2)
        out.append(Row([f"first message after {' / '.join(gap_label(g) for g in gaps)} idle, "
                        f"{readers} readers (p50)", joined(p50s(VR), us, " µs"),
                        *(joined(p50s(a), us, " µs") for a in ANCHORS),
                        "C futex: " + joined(floor, us, " µs") if t.ok is not None else "",
                        joined(rs, times) + " C futex" if t.ok is not None else ""], (t,)))

    def cpu(name: str) -> str:
        x = (queues.get(name) or {}).get("idle_cpu_percent")
        return "" if x is None else cpu_percent(x)

    x = queues[VR].get("idle_cpu_percent")
    window = (idle or {}).get("idle_window_s")
    when = f", {window[0]:g}-{window[1]:g} s after the last message" if window else ""
    if x is not None:
        out.append(Row([f"idle reader CPU{when}", cpu(VR), *(cpu(a) for a in ANCHORS), "", ""],
                       (Target("idle reader CPU (% of a core)", one(x), 0.01, "<= 0.01 %",
                               fmt=cpu_percent),)))
    return out


ICEORYX, C_FUTEX = "iceoryx2", "c-futex"
#: Per period of the cadence bench: the p50 target's base ("C futex" or "vLLM") and
#: bound, the p99 bound over vLLM's (None: no p99 target), the CPU per reader bound (%).
CADENCE_TARGETS = {0.01: ("C futex", 3.0, 1.0, 3.0), 0.002: ("vLLM", 1.0, None, 15.0)}


def _step_cell(row: dict[str, Any] | None) -> str:
    """``27.0 / 290 µs, CPU 10.5 % / 0.8 %`` (p50 / p99; per reader / the writer)."""
    if row is None:
        return ""
    text = joined([row["p50_us"], row["p99_us"]], us, " µs")
    if "reader_cpu_percent" in row:
        text += f", CPU {row['reader_cpu_percent']:.3g} % / {row['writer_cpu_percent']:.3g} %"
    return text


def cadence_rows(cadence: dict[str, Any] | None) -> list[Row]:
    """One row per cell of :mod:`bench.cadence`: p50 / p99 one-way and CPU per reader
    and writer per queue; the floor column holds the C futex wake of as many waiters
    and iceoryx2's figures."""
    out: list[Row] = []
    for cell in ((cadence or {}).get("cells") or {}).values():
        sides = cell["sides"]
        vr = sides.get(VR)
        if vr is None:
            continue
        period, n = float(cell["period_s"]), int(cell["readers"])
        base_name, p50_bound, p99_bound, cpu_bound = CADENCE_TARGETS.get(
            period, ("C futex", None, None, None))
        vllm = [sides[a] for a in ANCHORS if a in sides]
        best_p50 = _best([a["p50_us"] for a in vllm], True)
        best_p99 = _best([a["p99_us"] for a in vllm], True)
        floor = sides.get(C_FUTEX)
        base = best_p50 if base_name == "vLLM" else floor["p50_us"] if floor else None
        to_base, to_p99 = ratio_of(vr["p50_us"], base), ratio_of(vr["p99_us"], best_p99)
        what = f"a 1 KiB step every {period * 1000:g} ms, {n} reader{'s' if n > 1 else ''}"
        others = [f"C futex: {us(floor['p50_us'])}" if floor else "",
                  f"iceoryx2: {_step_cell(sides[ICEORYX])}" if ICEORYX in sides else ""]
        ratio = ", ".join(f"{label} {times(r)} {whom}" for label, r, whom in (
            ("p50", to_base, base_name), ("p99", to_p99, "vLLM")) if r is not None)
        figures = [Target(f"{what}: p50 / {base_name}", one(to_base), p50_bound,
                          f"p50 <= {p50_bound:g}x {base_name}" if p50_bound else "")]
        if p99_bound is not None:
            figures.append(Target(f"{what}: p99 / vLLM", one(to_p99), p99_bound,
                                  f"p99 <= {p99_bound:g}x vLLM"))
        if cpu_bound is not None:
            figures.append(Target(f"{what}: CPU per reader (% of a core)",
                                  one(vr.get("reader_cpu_percent")), cpu_bound,
                                  f"CPU per reader <= {cpu_bound:g} %", fmt=cpu_percent))
        out.append(Row([f"{what} (p50 / p99, CPU per reader / writer)", _step_cell(vr),
                        *(_step_cell(sides.get(a)) for a in ANCHORS),
                        "; ".join(o for o in others if o), ratio], tuple(figures)))
    return out


def large_rows(bench: dict[str, Any], per_op: dict[str, Any] | None) -> list[Row]:
    rows = bench.get("large") or []
    out: list[Row] = []
    two = 2 * KIB * KIB
    vr = _get(rows, "p50_us", "verifiedring-stream", 1, two)
    if vr is not None:
        anchors = [_get(rows, "p50_us", a, 1, two) for a in ANCHORS]
        to_v = ratio_of(vr, _best(anchors, True))
        out.append(Row(["2 MiB object (bytes in a tuple) round trip, 1 MiB chunks, streamed "
                        "(p50)", us(vr), *(us(a) if a else "" for a in anchors), "",
                        f"{times(to_v)} vLLM" if to_v is not None else ""],
                       (Target("2 MiB object round trip / vLLM", one(to_v), 0.09,
                               "<= 0.09x vLLM"),)))
    big = 64 * KIB * KIB
    vr = _get(rows, "gb_per_s_per_reader", "verifiedring-stream", 3, big)
    if vr is not None:
        anchors = [_get(rows, "gb_per_s_per_reader", a, 3, big) for a in ANCHORS]
        memcpy = (per_op or {}).get("memcpy_gb_per_s")
        to_m, to_v = ratio_of(vr, memcpy), ratio_of(vr, _best(anchors, False))
        ratio = ", ".join(f"{times(r)} {what}" for r, what in ((to_m, "memcpy"), (to_v, "vLLM"))
                          if r is not None)
        out.append(Row(["64 MiB object to 3 readers, 1 MiB chunks, streamed (per reader)",
                        gbs(vr), *(gbs(a) if a else "" for a in anchors),
                        f"memcpy: {gbs(memcpy)}" if memcpy else "", ratio],
                       (Target("64 MiB object to 3 readers (GB/s per reader)", one(vr), 2,
                               ">= 2 GB/s per reader", at_most=False, fmt=gbs),
                        Target("64 MiB object to 3 readers / memcpy", one(to_m)),
                        Target("64 MiB object to 3 readers / vLLM", one(to_v)))))
    return out


def machine_line(bench: dict[str, Any]) -> str:
    m = bench.get("machine") or {}
    line = (f"Measured on {m.get('cpu', '?')}, {m.get('cores', '?')} cores, kernel "
            f"{m.get('kernel', '?')}, Python {m.get('python', '?')}; load "
            f"{float(m.get('load_1min', 0)):.1f} at the start")
    if "repeats" in bench:
        line += (f"; round trips and streams: medians of {bench['repeats']} shuffled reps "
                 f"(seed {bench.get('seed')})")
    missing = [n for n, s in (bench.get("vllm") or {}).items() if s != "loaded"]
    return line + (f"; not loaded: {', '.join(missing)}" if missing else "") + "."


def rows(bench: dict[str, Any], per_op: dict[str, Any] | None,
         idle: dict[str, Any] | None, cadence: dict[str, Any] | None = None) -> list[Row]:
    """The rows the JSON has figures for, in ``ORDER``."""
    found = [*roundtrip_rows(bench), *stream_rows(bench), *per_op_rows(per_op),
             *idle_rows(idle), *cadence_rows(cadence), *large_rows(bench, per_op)]
    found.sort(key=lambda r: next(i for i, p in enumerate(ORDER) if r.cells[0].startswith(p)))
    return found


def targets(bench: dict[str, Any], per_op: dict[str, Any] | None,
            idle: dict[str, Any] | None, cadence: dict[str, Any] | None = None
            ) -> list[Target]:
    """Every row's figures, in the table's order: each ratio it shows, or the figure
    its target bounds, with the target if it has one."""
    return [t for r in rows(bench, per_op, idle, cadence) for t in r.figures]


def render(bench: dict[str, Any], per_op: dict[str, Any] | None,
           idle: dict[str, Any] | None, cadence: dict[str, Any] | None = None) -> list[str]:
    """The lines between the markers: the machine line, a blank line, the table."""
    table = [HEADER, ["---"] * len(HEADER),
             *(r.all_cells() for r in rows(bench, per_op, idle, cadence))]
    return [machine_line(bench), "", *("| " + " | ".join(r) + " |" for r in table)]


def rewrite(text: str, lines: list[str]) -> str:
    """``text`` with the lines strictly between its one start and one end marker line
    replaced by ``lines``; everything else unchanged."""
    old = text.split("\n")
    starts = [i for i, ln in enumerate(old) if ln.startswith(START)]
    ends = [i for i, ln in enumerate(old) if ln.startswith(END)]
    if not (len(starts) == 1 and len(ends) == 1 and starts[0] < ends[0]):
        raise ValueError(f"want one {START} line before one {END} line: {starts}, {ends}")
    return "\n".join([*old[: starts[0] + 1], *lines, *old[ends[0]:]])


def load_json(path: Path) -> dict[str, Any] | None:
    """The JSON at ``path``; None if there is no file."""
    return json.loads(path.read_text()) if path.exists() else None


def main(args: argparse.Namespace) -> int:
    results, readme = Path(args.results), Path(args.readme)
    bench = load_json(results / "bench.json")
    if bench is None:
        print(f"no {results / 'bench.json'}: run python -m bench report first")
        return 1
    lines = render(bench, load_json(results / "per_op.json"), load_json(results / "idle.json"),
                   load_json(results / "cadence.json"))
    readme.write_text(rewrite(readme.read_text(), lines))
    print(f"wrote {len(lines)} lines into {readme}")
    return 0
