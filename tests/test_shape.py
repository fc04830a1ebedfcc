"""The shape of the library: no module over MAX_MODULE_LINES lines and no class over
MAX_CLASS_LINES lines in ``src/verifiedring`` (AST-based: a class counts the lines
from its ``class`` statement to the end of its body, nested classes included); and no
class whose hierarchy (the classes of src it is made of) is over MAX_HIERARCHY_LINES
lines or MAX_HIERARCHY_ATTRIBUTES instance attributes.

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


# --- an end's whole class hierarchy ------------------------------------------------------
#
# A class's own size says little when it inherits most of what it is: the rule is met
# by splitting one object into mixins. So a class is also measured with every class of
# src in its hierarchy: the lines of them all, and the instance attributes they assign
# on ``self``. ``PENDING_HIERARCHIES`` lists today's offenders as (lines, attributes)
# when listed; it expires as PENDING does.

MAX_HIERARCHY_LINES = 400
MAX_HIERARCHY_ATTRIBUTES = 20

#: ``path::Class`` -> (hierarchy lines, instance attributes) when listed
PENDING_HIERARCHIES: dict[str, tuple[int, int]] = {}

_Key = tuple[str, str]  # (module path under src/verifiedring, class name)


def _package_of(rel: str) -> list[str]:
    return rel.removesuffix(".py").split("/")[:-1]


def _imported_from(rel: str, node: ast.ImportFrom) -> str | None:
    """The path under src/verifiedring of the module a ``from`` import reads, or None."""
    if node.level:
        parts = _package_of(rel)[: len(_package_of(rel)) - node.level + 1]
    elif (node.module or "").startswith("verifiedring"):
        parts = []
    else:
        return None
    name = (node.module or "").removeprefix("verifiedring").strip(".") if not node.level \
        else (node.module or "")
    parts = [*parts, *(p for p in name.split(".") if p)]
    for candidate in ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"])):
        if (SRC / candidate).is_file():
            return candidate
    return None


def _classes() -> tuple[dict[_Key, ast.ClassDef], dict[str, dict[str, _Key]]]:
    """Every class of src, and each module's names for classes (its own and imported)."""
    classes: dict[_Key, ast.ClassDef] = {}
    names: dict[str, dict[str, _Key]] = {}
    imports: dict[str, list[tuple[str, str, str]]] = {}
    for path in _modules():
        rel = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        names[rel] = {}
        imports[rel] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[(rel, node.name)] = node
                names[rel][node.name] = (rel, node.name)
            elif isinstance(node, ast.ImportFrom) and (source := _imported_from(rel, node)):
                imports[rel].extend((a.asname or a.name, source, a.name) for a in node.names)
    for _ in range(3):  # re-exports through a package's __init__
        for rel, entries in imports.items():
            for alias, source, name in entries:
                if name in names.get(source, {}):
                    names[rel].setdefault(alias, names[source][name])
    return classes, names


def _hierarchy(key: _Key, classes: dict[_Key, ast.ClassDef],
               names: dict[str, dict[str, _Key]]) -> set[_Key]:
    seen: set[_Key] = set()
    todo = [key]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for base in classes[current].bases:
            name = base.id if isinstance(base, ast.Name) else (
                base.attr if isinstance(base, ast.Attribute) else None)
            found = names[current[0]].get(name or "")
            if found is not None and found in classes:
                todo.append(found)
    return seen


def _self_attributes(node: ast.ClassDef) -> set[str]:
    stored: set[str] = set()
    for sub in ast.walk(node):
        targets: list[ast.expr] = []
        if isinstance(sub, ast.Assign):
            targets = list(sub.targets)
        elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
            targets = [sub.target]
        for target in targets:
            for t in ast.walk(target):
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                        and t.value.id == "self"):
                    stored.add(t.attr)
    return stored


def measure_hierarchies() -> dict[str, tuple[int, int]]:
    """Every class's (hierarchy lines, instance attributes), keyed ``path::Class``."""
    classes, names = _classes()
    sizes: dict[str, tuple[int, int]] = {}
    for key in classes:
        members = [classes[k] for k in _hierarchy(key, classes, names)]
        lines = sum(n.end_lineno - n.lineno + 1 for n in members if n.end_lineno is not None)
        attributes = set().union(*(_self_attributes(n) for n in members))
        sizes[f"{key[0]}::{key[1]}"] = (lines, len(attributes))
    return sizes


def _over(size: tuple[int, int]) -> bool:
    return size[0] > MAX_HIERARCHY_LINES or size[1] > MAX_HIERARCHY_ATTRIBUTES


def test_no_class_hierarchy_over_its_limits() -> None:
    new = {k: s for k, s in measure_hierarchies().items()
           if _over(s) and k not in PENDING_HIERARCHIES}
    listing = "\n".join(f"  {k}: {n} lines, {a} attributes" for k, (n, a) in sorted(new.items()))
    assert not new, (
        f"class hierarchies over the limits ({MAX_HIERARCHY_LINES} lines, "
        f"{MAX_HIERARCHY_ATTRIBUTES} instance attributes, the classes of src in each "
        f"class's hierarchy together); compose objects instead:\n{listing}"
    )


def test_pending_hierarchies_are_still_over_their_limits() -> None:
    sizes = measure_hierarchies()
    stale = sorted(k for k in PENDING_HIERARCHIES if not _over(sizes.get(k, (0, 0))))
    assert stale == [], "PENDING_HIERARCHIES lists classes no longer over: remove them"
