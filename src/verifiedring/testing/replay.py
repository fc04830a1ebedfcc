"""TLC's replay of a recorded trace, and its :class:`Verdict`.

:func:`replay` writes the events as ``TraceData.tla`` next to copies of the spec
modules the replay needs (:func:`~verifiedring.testing.tlc.spec_file`: the wheel's
or the checkout's) and has TLC (:mod:`~verifiedring.testing.tlc`, the one driver)
check the harness; the verdict names the first requirement an event failed, and
that event.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import tlc

#: TLC's result word for a trace replayed to its end (the harness's last invariant).
ACCEPTED = "TraceNotDoneInv"


@dataclass
class Verdict:
    """What TLC made of one trace."""

    accepted: bool
    result: str  # TLC's result word: ACCEPTED, a Replay*Inv, a safety invariant, error(...)
    events: int
    states: str
    seconds: float
    rejected_at: int | None  # index of the event that could not be replayed
    event: Any  # that event (a TraceEvent, or the queue trace's QueueEvent)
    output: str = field(repr=False)
    reasons: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def reason(self) -> str:
        if self.accepted:
            return "every event replayed"
        if self.result in self.reasons:
            return self.reasons[self.result]
        if self.result.endswith("Inv"):
            return f"the spec's invariant {self.result} is violated"
        return f"TLC failed: {self.result}"

    def describe(self) -> str:
        verdict = "ACCEPTED" if self.accepted else f"REJECTED ({self.result})"
        head = (
            f"trace validation: {verdict}: {self.events} events, {self.states} states, "
            f"TLC {self.seconds:.1f} s"
        )
        if self.accepted:
            return head
        where = "" if self.event is None else f"\n  at event {self.rejected_at}: {self.event}"
        return f"{head}\n  {self.reason}{where}"


@dataclass(frozen=True)
class Harness:
    """What one kind of trace replays through: ``specs`` (of :data:`~.tlc.TRACE_SPECS`,
    the last one the harness that binds ``Trace <- TraceValue``), the ``invariants``
    checked in every replayed state, and why each replay invariant rejects (``reasons``)."""

    specs: tuple[str, ...]
    invariants: tuple[str, ...]
    reasons: dict[str, str]


@dataclass(frozen=True)
class ReplayOptions:
    """How TLC runs a replay: its ``workers``, the ``timeout`` (seconds), and the
    ``directory`` the modules are written to (``None``: a temporary one, removed after)."""

    workers: int = 1
    timeout: float = 240
    directory: str | os.PathLike[str] | None = None


def data_module(rows: Sequence[str]) -> str:
    """``TraceData.TraceLog``: the events' TLA+ records (``rows``) as one sequence."""
    body = ",\n    ".join(rows)
    return (
        "---- MODULE TraceData ----\nEXTENDS Integers, Sequences\n"
        f"TraceLog == <<\n    {body}\n>>\n====\n"
    )


def replay(
    harness: Harness,
    data: str,
    constants: str,
    events: Sequence[Any],
    *,
    workers: int = 1,
    timeout: float = 240,
    directory: str | os.PathLike[str] | None = None,
) -> Verdict:
    """Have TLC replay ``events``: the ``harness``'s specs beside ``data`` (TraceData.tla),
    with the cfg's ``constants`` lines, checking its invariants and then :data:`ACCEPTED`."""
    tmp_ctx = tempfile.TemporaryDirectory(prefix="vr-trace-") if directory is None else None
    tmp = Path(tmp_ctx.name) if tmp_ctx is not None else Path(directory or ".")
    top = harness.specs[-1]
    try:
        for name in harness.specs:
            shutil.copy(tlc.spec_file(name), tmp / name)
        (tmp / "TraceData.tla").write_text(data)
        cfg = tmp / top.replace(".tla", ".cfg")
        checks = "\n".join(f"INVARIANT {name}" for name in (*harness.invariants, ACCEPTED))
        cfg.write_text(
            f"CONSTANTS\n{constants}    Trace <- TraceValue\n"
            f"INIT TraceInit\nNEXT TraceNext\n{checks}\n"
        )
        run = tlc.run(tmp / top, cfg, workers=workers, timeout=timeout, deadlock=False)
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()
    # a violation in the initial state (TLC message 2107) is one at the first event
    at: int | None = 0 if "is violated by the initial state" in run.output else None
    accepted = run.result == ACCEPTED
    if not accepted and run.trace and "step" in run.trace[-1].assignments:
        at = int(run.trace[-1].assignments["step"])
    event = events[at] if at is not None and at < len(events) else None
    return Verdict(
        accepted, run.result, len(events), run.states, run.seconds, at, event, run.output,
        harness.reasons,
    )
