#!/usr/bin/env python3
"""Run every TLC model listed in spec/models.toml and compare with the expected result.

Usage::

    python -m spec.run_models                 # the standard tier, one table, exit 1 on any surprise
    python -m spec.run_models --tier all      # every model, the deep tier too
    python -m spec.run_models --only MutTornRead --only 'MCRelaxed_*'
    python -m spec.run_models --traces        # also print each counterexample as a step table
    python -m spec.run_models --write-counterexamples   # regenerate spec/COUNTEREXAMPLES.md
    python -m spec.run_models --list

(``python spec/run_models.py ...`` works too.) TLC itself is started by
:mod:`spec.tlc`, which also defines the result words that ``models.toml``'s
``expected`` field uses.

Timing: ``--jobs`` TLC processes at a time (default 2), one worker each, the
``long`` models first, every one with C1 only (a long model under the full JIT
once stalled past its timeout in CI), the rest in the order of
``models.toml``. The first short model also writes a class-data-sharing
archive of the TLC jar that every later run maps (saves about a quarter of a
second of CPU per JVM start). The table gives each model's wall time; the last
line the whole run's wall time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

import tomllib

if __package__ in (None, ""):  # run as `python spec/run_models.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "spec"

from spec import tlc

SPEC_DIR = tlc.SPEC_DIR
MODELS_FILE = SPEC_DIR / "models.toml"
COUNTEREXAMPLES_FILE = SPEC_DIR / "COUNTEREXAMPLES.md"


@dataclasses.dataclass
class Model:
    name: str
    tla: str
    cfg: str
    bounds: str
    expected: str
    timeout: int = 150
    note: str = ""
    # runs for tens of seconds: started first
    long: bool = False
    # "standard" (make model-check) or "deep" (make model-check-all only)
    tier: str = "standard"


@dataclasses.dataclass
class Outcome:
    model: Model
    run: tlc.Result

    @property
    def ok(self) -> bool:
        return self.run.result == self.model.expected


def load_models() -> list[Model]:
    with MODELS_FILE.open("rb") as f:
        data = tomllib.load(f)
    return [Model(**m) for m in data["model"]]


TIERS = ("standard", "deep")


class SharedArchive:
    """A class-data-sharing archive of the TLC jar, written by the first run that asks
    for one and mapped by every run that starts after it is complete."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "tlc.jsa"
        self._lock = threading.Lock()
        self._claimed = False

    def options(self) -> tuple[tuple[str, ...], bool]:
        """(JVM options for the next run, whether that run writes the archive)."""
        if self.path.is_file():
            return (f"-XX:SharedArchiveFile={self.path}",), False
        with self._lock:
            if self._claimed:
                return (), False
            self._claimed = True
        return (f"-XX:ArchiveClassesAtExit={self.path}.part",), True

    def written(self) -> None:
        part = self.path.with_name(self.path.name + ".part")
        if part.is_file():
            part.rename(self.path)


def run_model(model: Model, workers: int, archive: SharedArchive | None = None) -> Outcome:
    java = list(tlc.JAVA_OPTIONS)
    writes = False
    if archive is not None and not model.long:
        cds, writes = archive.options()
        java += cds
    run = tlc.run(
        SPEC_DIR / model.tla,
        SPEC_DIR / model.cfg,
        workers=workers,
        timeout=model.timeout,
        java_options=java,
    )
    if writes and archive is not None:
        archive.written()
    return Outcome(model, run)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_all(models: list[Model], jobs: int) -> list[Outcome]:
    """Every model, ``jobs`` TLC processes at a time; outcomes in the order of ``models``."""
    # one worker per TLC process (counterexamples are then deterministic); one
    # process with two workers when --jobs 1
    workers = 1 if jobs > 1 else 2
    order = sorted(models, key=lambda m: not m.long)  # stable: models.toml's order within
    with (
        tempfile.TemporaryDirectory(prefix="tlc-cds-") as tmp,
        concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex,
    ):
        archive = SharedArchive(Path(tmp))
        futs = {m.name: ex.submit(run_model, m, workers, archive) for m in order}
        return [futs[m.name].result() for m in models]


def _split_top(text: str, sep: str) -> list[str]:
    """Split on sep at bracket depth 0."""
    parts: list[str] = []
    cur: list[str] = []
    depth, i = 0, 0
    while i < len(text):
        ch = text[i]
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>" and not (ch == ">" and text[i - 1 : i + 1] in (":>", "->")):
            depth -= 1
        if depth == 0 and text.startswith(sep, i):
            parts.append("".join(cur))
            cur, i = [], i + len(sep)
            continue
        cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _as_map(value: str) -> dict[str, str] | None:
    """Parse a TLC function value ``(k1 :> v1 @@ k2 :> v2)`` into a dict, else None."""
    v = value.strip()
    if not (v.startswith("(") and v.endswith(")") and ":>" in v):
        return None
    out: dict[str, str] = {}
    for part in _split_top(v[1:-1].strip(), "@@"):
        kv = _split_top(part, ":>")
        if len(kv) != 2:
            return None
        out[kv[0]] = kv[1]
    return out


def _diff(name: str, old: str | None, new: str) -> list[str]:
    """Changed entries only: ``mem[<<"lo", 0, 0>>] = 1`` instead of the whole function."""
    if old == new:
        return []
    om, nm = (_as_map(old) if old is not None else None), _as_map(new)
    # TLC prints an empty function as << >>: a map that became (or was) empty
    if om is not None and new.strip() == "<< >>":
        nm = {}
    if nm is not None and old is not None and old.strip() == "<< >>":
        om = {}
    if om is None or nm is None:
        return [f"{name} = {new}"]
    out: list[str] = []
    for k, v in nm.items():
        out += _diff(f"{name}[{k}]", om.get(k), v)
    for k in om.keys() - nm.keys():
        out.append(f"{name}[{k}] removed")
    return out


def trace_table(run: tlc.Result) -> str:
    """Markdown step table: step, action, what changed (changed entries only)."""
    rows = ["| # | step | changes |", "|---|------|---------|"]
    prev: dict[str, str] = {}
    for st in run.trace:
        if st.action == "Init":
            rows.append(f"| {st.index} | Init | the initial state |")
        else:
            diffs: list[str] = []
            for k, v in st.assignments.items():
                diffs += _diff(k, prev.get(k), v)
            changed = "; ".join(diffs) if diffs else "(no change: a failed poll)"
            rows.append(f"| {st.index} | {st.action} | `{changed}` |")
        prev = st.assignments
    if run.loop_note:
        rows.append(f"| | _{run.loop_note}_ | the behavior stays here forever |")
    return "\n".join(rows)


COUNTEREXAMPLES_HEAD = """\
# Counterexamples (generated)

<!-- Generated by `python -m spec.run_models --write-counterexamples`; do not edit. -->

TLC's shortest counterexample (breadth-first search, one worker) of every model in
`models.toml` whose expected result is a violation, as a step table. Only the
variables a step changed are shown; `-1` is `Torn`, `0` is `Empty` (the SC model),
`None` = `-2` means "no early load pending" (the relaxed model). What each model
is and what it shows: [README.md](README.md).
"""


# the page's sections: mutants, then the SC redundancy check, the relaxed model, the queue
PAGE_ORDER = ("Mut", "MCNoClearWritten", "MCRelaxed", "MCMessageQueue")


def _page_rank(name: str) -> int:
    return next((i for i, p in enumerate(PAGE_ORDER) if name.startswith(p)), len(PAGE_ORDER))


def counterexamples_page(outcomes: list[Outcome]) -> str:
    parts = [COUNTEREXAMPLES_HEAD]
    for o in sorted(outcomes, key=lambda o: _page_rank(o.model.name)):
        m = o.model
        parts.append(f"\n## `{m.name}` → `{o.run.result}`\n")
        parts.append(f"`{m.tla}` + `{m.cfg}`; bounds: {m.bounds}.\n")
        if m.note:
            parts.append(f"{m.note}\n")
        if o.run.trace:
            parts.append(trace_table(o.run) + "\n")
        else:
            parts.append("_(TLC printed no trace)_\n")
    return "\n".join(parts)


def print_table(outcomes: list[Outcome], total: float, cpu: float, load: float) -> None:
    hdr = ("model", "bounds", "states", "time", "result", "expected", "")
    rows = [
        (
            o.model.name,
            o.model.bounds,
            o.run.states,
            f"{o.run.seconds:.1f}s",
            o.run.result,
            o.model.expected,
            "ok" if o.ok else "SURPRISE",
        )
        for o in outcomes
    ]
    widths = [max(len(str(r[i])) for r in [hdr, *rows]) for i in range(len(hdr))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*hdr))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*r).rstrip())
    bad = sum(not o.ok for o in outcomes)
    print(
        f"\n{len(outcomes)} models, {len(outcomes) - bad} as expected, "
        f"{bad} surprise(s); wall time {total:.1f}s, CPU {cpu:.1f}s (TLC's JVMs, user + sys); "
        f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after"
    )


def select(models: list[Model], only: list[str]) -> list[Model]:
    unknown = [o for o in only if not o.endswith("*") and o not in {m.name for m in models}]
    if unknown:
        raise SystemExit(f"error: unknown model(s): {', '.join(unknown)}")
    return [
        m
        for m in models
        if any(m.name == o or (o.endswith("*") and m.name.startswith(o[:-1])) for o in only)
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this model (repeatable; also accepts a prefix ending in *; any tier)",
    )
    ap.add_argument(
        "--traces", action="store_true", help="print each counterexample as a step table"
    )
    ap.add_argument(
        "--write-counterexamples",
        action="store_true",
        help=f"run every model expected to fail (any tier) and write {COUNTEREXAMPLES_FILE.name}",
    )
    ap.add_argument("--jobs", type=int, default=2, help="TLC processes at a time (default 2)")
    ap.add_argument(
        "--tier",
        choices=("standard", "all"),
        default="standard",
        help="standard: every model but the deep tier (default); all: every model",
    )
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    return ap.parse_args(argv)


def chosen(models: list[Model], args: argparse.Namespace) -> list[Model]:
    """The models this run checks."""
    if args.write_counterexamples:
        if args.only:
            raise SystemExit("error: --write-counterexamples writes the whole page; no --only")
        return [m for m in models if m.expected != "holds"]
    if args.only:
        return select(models, args.only)
    return [m for m in models if args.tier == "all" or m.tier == "standard"]


def report(outcomes: list[Outcome], args: argparse.Namespace) -> int:
    """Traces, surprises, the counterexample page; the exit status."""
    if args.traces:
        for o in outcomes:
            if o.run.trace:
                print(f"\n### {o.model.name}: {o.run.result}\n")
                print(trace_table(o.run))
    bad = [o for o in outcomes if not o.ok]
    for o in bad:
        print(
            f"\n--- {o.model.name}: got {o.run.result}, expected {o.model.expected} "
            f"(TLC exit {o.run.rc}); output tail:\n{o.run.output[-3000:]}",
            file=sys.stderr,
        )
    if args.write_counterexamples:
        if bad:
            print(f"not writing {COUNTEREXAMPLES_FILE.name}: surprises", file=sys.stderr)
        else:
            COUNTEREXAMPLES_FILE.write_text(counterexamples_page(outcomes))
            print(f"wrote {COUNTEREXAMPLES_FILE.relative_to(SPEC_DIR.parent)}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    models = load_models()
    bad_tiers = sorted({m.tier for m in models} - set(TIERS))
    if bad_tiers:
        raise SystemExit(f"error: {MODELS_FILE.name}: unknown tier(s) {bad_tiers}")
    if args.list:
        for m in models:
            tags = " ".join(
                t for t in (m.tier if m.tier != "standard" else "", "long" if m.long else "") if t
            )
            print(f"{m.name:36} {m.expected:32} {tags:10} {m.bounds}")
        return 0
    models = chosen(models, args)
    try:
        tlc.find_java()
        tlc.find_jar()
    except tlc.TLCError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    load, t0, cpu0 = os.getloadavg()[0], time.monotonic(), _children_cpu()
    outcomes = run_all(models, max(1, args.jobs))
    print_table(outcomes, time.monotonic() - t0, _children_cpu() - cpu0, load)
    return report(outcomes, args)


if __name__ == "__main__":
    sys.exit(main())
