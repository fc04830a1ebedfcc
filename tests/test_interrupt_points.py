"""KeyboardInterrupt at every place CPython can deliver one during a library call, on a
fixed sample of the points (every ``STRIDE``-th of each scenario, of the pairs fewer;
``make interrupts`` tries them all): each reader gets each message exactly once or its
report exactly once, in order, or the writer is broken and every reader told; no wedge,
stall, duplicate or MisuseError afterwards (``tests/interrupts``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from interrupts.known import KNOWN

ROOT = Path(__file__).resolve().parent.parent
STRIDE = 3  # the CI share: a third of the points of each scenario
SECOND_STRIDE = 12  # of the pairs' first points and of each one's second points, and of
# the points a nested scenario tries with a second interrupt in the first's handling
BOUND = 600.0


def _sample(out: Path, stride: int, scenarios: list[str]) -> list[dict[str, object]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    subprocess.run(
        [sys.executable, "-m", "tests.interrupts", *scenarios, "--stride", str(stride),
         "--jobs", "2", "--json", str(out)],
        cwd=ROOT, env=env, timeout=BOUND, check=False, capture_output=True,
    )
    results: list[dict[str, object]] = json.loads(out.read_text())
    return results


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    from interrupts.scenarios import SCENARIOS

    tmp = tmp_path_factory.mktemp("interrupts")
    singles = [name for name, s in SCENARIOS.items() if not (s.second or s.nested)]
    pairs = [name for name, s in SCENARIOS.items() if s.second or s.nested]
    return (_sample(tmp / "points.json", STRIDE, singles)
            + _sample(tmp / "pairs.json", SECOND_STRIDE, pairs))


@pytest.mark.slow
def test_every_scenario_lists_points_and_tries_sampled_ones(
    sampled: list[dict[str, object]]
) -> None:
    from interrupts.scenarios import SCENARIOS

    assert sorted(str(r["scenario"]) for r in sampled) == sorted(SCENARIOS)
    for r in sampled:
        points, tried = r["points"], r["tried"]
        assert isinstance(points, int) and isinstance(tried, int)
        assert points > 0, r
        s = SCENARIOS[str(r["scenario"])]
        if s.nested:  # each sampled point with each of its ``nested`` second ones
            assert tried == len(range(0, points // s.nested, SECOND_STRIDE)) * s.nested, r
        elif not s.second:
            assert tried == len(range(0, points, STRIDE)), r
        else:
            assert tried > 0, r


@pytest.mark.slow
def test_no_interrupt_breaks_the_promise_outside_the_known_windows(
    sampled: list[dict[str, object]]
) -> None:
    new = {
        f"{r['scenario']}: {where}: {what}"
        for r in sampled
        for where, what in r["violations"].items()  # type: ignore[attr-defined]
        if (r["scenario"], re.sub(r" #\d+$", "", where)) not in KNOWN
    }
    assert new == set()
