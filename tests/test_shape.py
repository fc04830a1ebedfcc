"""The shape of the library: no module over MAX_MODULE_LINES lines and no class over
MAX_CLASS_LINES lines in ``src/verifiedring`` (AST-based: a class counts the lines
from its ``class`` statement to the end of its body, nested classes included).

``PENDING`` lists today's offenders with the size they had when listed (issue 16's
refactor is splitting exactly these); remove an entry once its refactor lands.
Anything new over a limit fails, and so does a PENDING entry that is no longer
over its limit (the allowlist cannot go stale).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "verifiedring"
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250

#: offender (a module's path under src/verifiedring, or ``path::Class``) -> lines when listed
PENDING: dict[str, int] = {}


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def measure() -> dict[str, int]:
    """Every module's line count and every class's line span, keyed as in PENDING."""
    sizes: dict[str, int] = {}
    for path in _modules():
        rel = path.relative_to(SRC).as_posix()
        text = path.read_text()
        sizes[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                sizes[f"{rel}::{node.name}"] = node.end_lineno - node.lineno + 1
    return sizes


def _limit(key: str) -> int:
    return MAX_CLASS_LINES if "::" in key else MAX_MODULE_LINES


def over_limits() -> dict[str, int]:
    return {k: n for k, n in measure().items() if n > _limit(k)}


def test_no_module_or_class_over_its_limit() -> None:
    new = {k: n for k, n in over_limits().items() if k not in PENDING}
    listing = "\n".join(
        f"  {k}: {n} lines (limit {_limit(k)})" for k, n in sorted(new.items())
    )
    assert not new, (
        f"over the size limits (modules {MAX_MODULE_LINES} lines, classes "
        f"{MAX_CLASS_LINES}) in src/verifiedring; split them:\n{listing}"
    )


def test_pending_entries_are_still_over_their_limit() -> None:
    sizes = measure()
    stale = {k: sizes.get(k) for k in PENDING if sizes.get(k, 0) <= _limit(k)}
    listing = "\n".join(
        f"  {k}: {'gone' if n is None else f'{n} lines'} (limit {_limit(k)})"
        for k, n in sorted(stale.items())
    )
    assert not stale, (
        f"tests/test_shape.py PENDING lists offenders that are no longer over their "
        f"limit; remove them:\n{listing}"
    )
