"""The repository's door to the one TLC driver, :mod:`verifiedring.testing.tlc`.

The driver ships in the package (trace validation runs from an installed wheel);
``spec/run_models.py`` and the tools of this repository use it through this module,
whose :data:`SPEC_DIR` is this folder, and whose :func:`run` finds the modules a model
extends in it (a mutant in ``mutants/`` extends the specs here). See the driver for the
result words.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from verifiedring.testing.tlc import (
    JAVA_OPTIONS,
    MSG_BACK_TO_STATE,
    MSG_DEADLOCK,
    MSG_INVARIANT_VIOLATED,
    MSG_INVARIANT_VIOLATED_INITIAL,
    MSG_PROGRESS,
    MSG_STATE,
    MSG_STATS,
    MSG_STUTTERING,
    MSG_TEMPORAL_VIOLATED,
    Result,
    TLCError,
    TraceState,
    available,
    classify,
    find_jar,
    find_java,
    parse_messages,
    parse_state,
)
from verifiedring.testing.tlc import run as _run

SPEC_DIR = Path(__file__).resolve().parent
#: Every folder of spec/ that holds a module: TLC's library path, so a model finds the
#: modules it extends in any family (a trace harness extends the ring's and the queue's)
LIBRARY = tuple(sorted({p.parent for p in SPEC_DIR.rglob("*.tla")}))


def run(
    tla: Path,
    cfg: Path,
    *,
    workers: int = 1,
    timeout: float = 150,
    deadlock: bool = True,
    java_options: Sequence[str] = JAVA_OPTIONS,
) -> Result:
    """:func:`verifiedring.testing.tlc.run` with spec/'s folders as TLC's module library."""
    return _run(tla, cfg, workers=workers, timeout=timeout, deadlock=deadlock,
                library=LIBRARY, java_options=java_options)


__all__ = [
    "JAVA_OPTIONS",
    "LIBRARY",
    "MSG_BACK_TO_STATE",
    "MSG_DEADLOCK",
    "MSG_INVARIANT_VIOLATED",
    "MSG_INVARIANT_VIOLATED_INITIAL",
    "MSG_PROGRESS",
    "MSG_STATE",
    "MSG_STATS",
    "MSG_STUTTERING",
    "MSG_TEMPORAL_VIOLATED",
    "SPEC_DIR",
    "Result",
    "TLCError",
    "TraceState",
    "available",
    "classify",
    "find_jar",
    "find_java",
    "parse_messages",
    "parse_state",
    "run",
]
