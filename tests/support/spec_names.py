"""Reading spec action names and their ``# spec:`` code sites (no imports of the code).

Shared by ``tests/test_step_names.py`` (steps.py, spec actions, code sites and machine
rules agree) and ``tests/test_docs.py`` (the action tables of spec/'s pages agree with them).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SRC = ROOT / "src" / "verifiedring"

_DEFINITION = re.compile(r"^([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*==", re.MULTILINE)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_PRIMED = re.compile(r"[\w)\]>]'")
_SITE = re.compile(r"#\s*spec:\s*(\w+)")


def _strip_comments(tla: str) -> str:
    tla = re.sub(r"\(\*.*?\*\)", " ", tla, flags=re.DOTALL)
    return re.sub(r"\\\*[^\n]*", " ", tla)


def tla_definitions(tla: str) -> dict[str, str]:
    """Top-level operator definitions ``Name == body`` (or ``Name(args) == body``)."""
    text = _strip_comments(tla)
    text = text.split("\n====", 1)[0]
    matches = list(_DEFINITION.finditer(text))
    bodies = {}
    for m, nxt in zip(matches, [*matches[1:], None], strict=True):
        end = nxt.start() if nxt is not None else len(text)
        bodies[m.group(1)] = text[m.end() : end]
    return bodies


def protocol_actions(tla: str, next_name: str = "Next") -> set[str]:
    """The actions of ``Next`` (or ``next_name``): definitions reachable from it that
    assign a primed variable themselves and are not part of another such definition
    (a helper like ``Publish(S, f)``). Composites (``Writer``, ``Reader(r)``), ``Done`` (pure
    stutter), invariants, properties and helpers are not protocol actions."""
    defs = tla_definitions(tla)
    if next_name not in defs:
        raise AssertionError(f"the spec defines no {next_name}")
    seen: set[str] = set()
    todo = [next_name]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [i for i in _IDENT.findall(defs[name]) if i in defs and i not in seen]
    assigning = {n for n in seen if n != next_name and _PRIMED.search(defs[n])}
    parts = {i for n in assigning for i in _IDENT.findall(defs[n]) if i in assigning and i != n}
    return assigning - parts


def spec_sites(files: list[Path]) -> Counter[str]:
    """How many ``# spec: Name`` sites each name has in ``files``."""
    return Counter(name for f in files for name in _SITE.findall(f.read_text()))


def site_files(files: list[Path]) -> dict[str, set[Path]]:
    """For each name with a ``# spec: Name`` site in ``files``: the files holding one."""
    where: dict[str, set[Path]] = {}
    for f in files:
        for name in _SITE.findall(f.read_text()):
            where.setdefault(name, set()).add(f)
    return where
