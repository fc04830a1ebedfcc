#!/usr/bin/env python3
"""Run every TLC model listed in spec/models.toml and compare with the expected result.

Usage::

    python -m spec.run_models                 # the standard tier, one table, exit 1 on any surprise
    python -m spec.run_models --tier all      # every model, the deep tier too
    python -m spec.run_models --only MutTornRead --only 'MCRelaxed_*'
    python -m spec.run_models --traces        # also print each counterexample as a step table
    python -m spec.run_models --write-counterexamples   # regenerate spec/COUNTEREXAMPLES.md
    python -m spec.run_models --list
    python -m spec.run_models --cfg MC_R2C2    # the cfg models.toml gives a model (none is kept)

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
import shutil
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


#: A TLC constant's value in models.toml: an int or bool is that TLA+ value, a string a
#: TLA+ expression as written; "<- Op" substitutes the operator Op.
Constant = int | bool | str


@dataclasses.dataclass
class Profile:
    """What the models of one family (and one set of constants) share."""

    specification: str
    constants: dict[str, Constant]
    invariants: list[str]
    properties: list[str]
    # state constraints (CONSTRAINT): a bound on the states explored
    constraints: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Model:
    name: str
    # the root module, a path under spec/
    tla: str
    profile: str
    expected: str
    # what differs from the profile: the specification, constants merged over its
    # constants, invariants / properties / constraints replacing its lists
    specification: str | None = None
    constants: dict[str, Constant] = dataclasses.field(default_factory=dict)
    invariants: list[str] | None = None
    properties: list[str] | None = None
    constraints: list[str] | None = None
    # what the model is (a mutant: the bug it puts back)
    about: str = ""
    timeout: int = 150
    note: str = ""
    # runs for tens of seconds: started first
    long: bool = False
    # "standard" (make model-check) or "deep" (make model-check-all only)
    tier: str = "standard"
    # the TLC configuration, written by load_models from the profile and the overrides
    cfg: str = dataclasses.field(default="", init=False)

    @property
    def bounds(self) -> str:
        """The constants that differ from the profile's, as ``Name=value`` words."""
        return " ".join(f"{k}={_tla_value(v)}" for k, v in self.constants.items()) or "-"

    @property
    def family(self) -> str:
        """The model family: the first folder of its root module's path."""
        return self.tla.split("/", 1)[0]


def _tla_value(value: Constant) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return str(value)


def cfg_text(model: Model, profile: Profile) -> str:
    """The model's TLC configuration, from its profile and what it overrides."""
    constants = {**profile.constants, **model.constants}
    lines = [f"\\* {model.name} (generated from spec/models.toml)"]
    if model.about:
        lines.append(f"\\* {model.about}")
    lines += [f"SPECIFICATION {model.specification or profile.specification}", "CONSTANTS"]
    for name, value in constants.items():
        text = _tla_value(value)
        lines.append(f"    {name} {text}" if text.startswith("<-") else f"    {name} = {text}")
    for section, names in (
        ("INVARIANTS", profile.invariants if model.invariants is None else model.invariants),
        ("PROPERTIES", profile.properties if model.properties is None else model.properties),
        ("CONSTRAINTS",
         profile.constraints if model.constraints is None else model.constraints),
    ):
        if names:
            lines += [section, *(f"    {n}" for n in names)]
    return "\n".join(lines) + "\n"


@dataclasses.dataclass
class Outcome:
    model: Model
    run: tlc.Result

    @property
    def ok(self) -> bool:
        return self.run.result == self.model.expected


def load_models() -> tuple[list[Model], dict[str, Profile]]:
    """The models and the profiles of models.toml; an unknown profile or constant is an error."""
    with MODELS_FILE.open("rb") as f:
        data = tomllib.load(f)
    profiles = {name: Profile(**p) for name, p in data["profile"].items()}
    models = [Model(**m) for m in data["model"]]
    for m in models:
        if m.profile not in profiles:
            raise SystemExit(f"error: {MODELS_FILE.name}: {m.name}: no profile {m.profile!r}")
        extra = sorted(m.constants.keys() - profiles[m.profile].constants.keys())
        if extra:
            raise SystemExit(f"error: {MODELS_FILE.name}: {m.name}: constants {extra} "
                             f"are not profile {m.profile!r}'s")
        m.cfg = cfg_text(m, profiles[m.profile])
    return models, profiles


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
    # TLC reads a cfg from its root module's folder: both go to a folder of their own,
    # the other modules are found on the library path (every folder of spec/)
    with tempfile.TemporaryDirectory(prefix=f"model-{model.name}-") as tmp:
        root = Path(tmp) / Path(model.tla).name
        shutil.copyfile(SPEC_DIR / model.tla, root)
        cfg = Path(tmp) / f"{model.name}.cfg"
        cfg.write_text(model.cfg)
        run = tlc.run(root, cfg, workers=workers, timeout=model.timeout, java_options=java)
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
        parts.append(f"`{m.tla}`, profile `{m.profile}`; beyond it: {m.bounds}.\n")
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
    ap.add_argument(
        "--cfg", metavar="NAME", help="print the TLC configuration models.toml gives NAME and exit"
    )
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
    models, _profiles = load_models()
    if args.cfg:
        print(select(models, [args.cfg])[0].cfg, end="")
        return 0
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
