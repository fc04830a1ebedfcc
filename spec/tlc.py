"""The repository's door to the one TLC driver, :mod:`verifiedring.testing.tlc`.

The driver ships in the package (trace validation runs from an installed wheel);
``spec/run_models.py`` and the tools of this repository use it through this module,
whose :data:`SPEC_DIR` is this folder. See the driver for the result words.
"""

from __future__ import annotations

from pathlib import Path

from verifiedring.testing.tlc import (
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
    run,
)

SPEC_DIR = Path(__file__).resolve().parent

__all__ = [
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
