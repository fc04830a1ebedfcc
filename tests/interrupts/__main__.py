"""``python -m tests.interrupts``: the enumeration's table (``make interrupts``)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from .run import Result, enumerate_scenario, every, preload
from .scenarios import SCENARIOS


def table(results: list[Result]) -> str:
    rows = [f"{'scenario':<14} {'points':>6} {'tried':>6} {'missed':>6} {'violations':>10}"]
    rows += [f"{r.scenario:<14} {r.points:>6} {r.tried:>6} {r.missed:>6} {len(r.violations):>10}"
             for r in results]
    total = [sum(getattr(r, k) for r in results) for k in ("points", "tried", "missed")]
    rows.append(f"{'all':<14} {total[0]:>6} {total[1]:>6} {total[2]:>6} "
                f"{sum(len(r.violations) for r in results):>10}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.interrupts", description=__doc__)
    ap.add_argument("scenarios", nargs="*", default=list(SCENARIOS),
                    help=f"the scenarios to run (default: all of {', '.join(SCENARIOS)})")
    ap.add_argument("--stride", type=int, default=1, help="try every n-th point only")
    ap.add_argument("--jobs", type=int, default=2, help="children at a time")
    ap.add_argument("--quiet", action="store_true", help="the table only, no violations")
    ap.add_argument("--json", metavar="PATH", help="also write the results there")
    args = ap.parse_args(argv)
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        ap.error(f"no such scenario: {', '.join(sorted(unknown))}")
    preload(args.scenarios)
    results = []
    for name in args.scenarios:
        r = enumerate_scenario(name, every(args.stride), args.jobs)
        results.append(r)
        if not args.quiet:
            for where, what in r.violations.items():
                print(f"{name}: {where}: {what}", flush=True)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    return 1 if any(r.violations for r in results) else 0


sys.exit(main())
