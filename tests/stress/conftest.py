"""What the stress tests moved: one line per run, and a table with the total at the end.

A run's line -- ``stress ring: N checked messages (R readers) in T s = X msg/s`` -- is
written to stderr past pytest's capture, so it is in the CI log with or without
``-s``, with or without xdist (a worker's stderr is the terminal's). "Checked" means
received and verified (content, order, count), summed over the readers. Each
process also notes its runs in a ledger file shared by the session's workers; the
last worker to finish (or the only process) writes the table and the total.
``support.stress_plan.PLAN`` is what each CI run moves; ``test_plan.py`` checks that
it adds up to ``CI_TARGET``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.stress_plan import CI_TARGET, PLAN

Report = Callable[[str, int, int, float], None]


def _ledger(config: pytest.Config) -> str:
    worker = getattr(config, "workerinput", None)
    run = worker["testrunuid"] if worker else f"{os.getpid()}"
    return os.path.join(tempfile.gettempdir(), f"vr-stress-{run}.jsonl")


@contextlib.contextmanager
def _locked(path: str) -> Iterator[Any]:
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield f
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _emit(config: pytest.Config, text: str) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


@pytest.fixture
def report_checked(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> Report:
    """``report_checked(label, checked, readers, seconds)``: the run's line, and its
    ledger entry; ``label`` is its :data:`PLAN` key."""

    def note(label: str, checked: int, readers: int, seconds: float) -> None:
        kind = PLAN[label][0]
        rate = checked / seconds if seconds > 0 else 0.0
        _emit(pytestconfig, f"\nstress {kind}: {checked} checked messages ({readers} reader"
                            f"{'s' if readers != 1 else ''}) "
                            f"in {seconds:.2f} s = {rate:,.0f} msg/s [{label}]")
        entry = {"label": label, "kind": kind, "checked": checked, "readers": readers,
                 "seconds": seconds}
        with _locked(_ledger(pytestconfig)) as f:
            f.write(json.dumps(entry) + "\n")

    return note


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    worker = getattr(config, "workerinput", None)
    if worker is None and getattr(config.option, "numprocesses", None):
        return  # the xdist controller: its workers report
    path = _ledger(config)
    with _locked(path) as f:
        f.write(json.dumps({"done": worker["workerid"] if worker else "main"}) + "\n")
        f.seek(0)
        rows = [json.loads(line) for line in f if line.strip()]
        if len([r for r in rows if "done" in r]) < (worker["workercount"] if worker else 1):
            return
        os.unlink(path)
    runs = [r for r in rows if "label" in r]
    if runs:
        _emit(config, _table(runs))


def _table(runs: list[dict[str, Any]]) -> str:
    lines = ["", "stress runs (checked = received and verified, summed over readers):",
             f"  {'run':44s} {'checked':>10s} {'readers':>7s} {'seconds':>8s} {'msg/s':>9s}"]
    for r in sorted(runs, key=lambda r: (r["kind"], r["label"])):
        rate = r["checked"] / r["seconds"] if r["seconds"] > 0 else 0.0
        lines.append(f"  {r['label']:44s} {r['checked']:>10,d} {r['readers']:>7d} "
                     f"{r['seconds']:>8.2f} {rate:>9,.0f}")
    total = sum(r["checked"] for r in runs)
    kinds = sorted({r["kind"] for r in runs})
    lines.append(f"  total: {total:,d} checked messages over {', '.join(kinds)} "
                 f"({'>=' if total >= CI_TARGET else '<'} {CI_TARGET:,d})")
    return "\n".join(lines)
