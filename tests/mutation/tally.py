"""The kill rate per module of the last ``mutmut run`` (its ``mutants/`` folder).

mutmut keeps one ``<file>.meta`` per mutated file: each mutant's exit status (None: not
run yet). This prints the markdown table of tests/mutation/REPORT.md, one row per file of
``[tool.mutmut] only_mutate``, then every survivor by name (``mutmut show NAME`` prints its
diff). Killed counts a failing test; typed, a mutant ``mypy --strict`` rejects (mutmut's
type-check pass, before any test); timeout, a run past its wall bound. Timeouts are not
counted as caught: a worker can also hang for reasons of its own (torch's thread pool
across the fork, tests/mutation/REPORT.md), so a timeout is no evidence either way.
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
          "| caught % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
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
    """One table row; the rate (killed or typed) is over the mutants run, timeouts out."""
    caught = counts["killed"] + counts["typed"]
    run = caught + counts["survived"] + counts["no test"]
    rate = f"{100 * caught / run:.1f}" if run else "-"
    cells = (counts["killed"], counts["typed"], counts["timeout"], counts["survived"],
             counts["no test"], counts["not run"])
    return f"| {name} | {n} | " + " | ".join(map(str, cells)) + f" | {rate} |"


if __name__ == "__main__":
    sys.exit(main())
