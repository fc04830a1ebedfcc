"""The kill rate per module of the last ``mutmut run`` (its ``mutants/`` folder).

mutmut keeps one ``<file>.meta`` per mutated file: each mutant's exit status (None: not
run yet). This prints the markdown table of tests/mutation/REPORT.md, one row per file of
``[tool.mutmut] only_mutate``, then every survivor by name (``mutmut show NAME`` prints its
diff). Killed counts a failing test; typed, a mutant ``mypy --strict`` rejects (mutmut's
type-check pass, before any test); timeout, a run past its wall bound. "caught %" leaves
timeouts out: a worker can also time out for reasons of its own (some of these mutants'
tests pass when run alone, tests/mutation/REPORT.md), so a timeout is no evidence either
way; "worst %" counts every timeout as a survivor.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
#: mutmut's exit statuses, as its results name them
KILLED = frozenset({1, 3, -9, -11})
TIMEOUT = frozenset({36, 24, -24, 152, 255})
TYPED = 37
SURVIVED = 0


def modules() -> list[str]:
    """The files ``make mutation`` mutates, from pyproject.toml."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    files: list[str] = config["tool"]["mutmut"]["only_mutate"]
    return files


def statuses(module: str) -> dict[str, int | None]:
    """Each mutant of ``module`` and its exit status (None: not run)."""
    meta = ROOT / "mutants" / f"{module}.meta"
    if not meta.exists():
        return {}
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    return codes


def tally(codes: dict[str, int | None]) -> Counter[str]:
    """Killed, typed, timeout, survived, not run and other (no test reached it)."""
    counts: Counter[str] = Counter()
    for code in codes.values():
        if code is None:
            counts["not run"] += 1
        elif code in KILLED:
            counts["killed"] += 1
        elif code in TIMEOUT:
            counts["timeout"] += 1
        elif code == TYPED:
            counts["typed"] += 1
        elif code == SURVIVED:
            counts["survived"] += 1
        else:
            counts["no test"] += 1
    return counts


def main() -> int:
    print("| module | mutants | killed | typed | timeout | survived | no test | not run "
          "| caught % | worst % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    total: Counter[str] = Counter()
    survivors: list[str] = []
    for module in modules():
        codes = statuses(module)
        counts = tally(codes)
        total += counts
        survivors += sorted(k for k, c in codes.items() if c == SURVIVED)
        print(row(module.removeprefix("src/verifiedring/"), len(codes), counts))
    print(row("all", sum(total.values()), total))
    print()
    for name in survivors:
        print(f"- `{name}`")
    return 0


def row(name: str, n: int, counts: Counter[str]) -> str:
    """One table row; the rates (killed or typed) are over the mutants run, timeouts
    out (caught) and counted as survivors (worst)."""
    caught = counts["killed"] + counts["typed"]
    run = caught + counts["survived"] + counts["no test"]
    cells = (counts["killed"], counts["typed"], counts["timeout"], counts["survived"],
             counts["no test"], counts["not run"])
    rates = (_rate(caught, run), _rate(caught, run + counts["timeout"]))
    return f"| {name} | {n} | " + " | ".join(map(str, (*cells, *rates))) + " |"


def _rate(caught: int, run: int) -> str:
    return f"{100 * caught / run:.1f}" if run else "-"


if __name__ == "__main__":
    sys.exit(main())
