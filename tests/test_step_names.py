"""One name per protocol step: steps.py == spec actions == `# spec:` sites == RingMachine rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_ring_stateful import RingMachine

from verifiedring import steps

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "spec" / "RingBuffer.tla"
RING_PY = ROOT / "src" / "verifiedring" / "ring.py"

_DEFINITION = re.compile(r"^([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*==", re.MULTILINE)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_PRIMED = re.compile(r"[\w)\]>]'")


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


def protocol_actions(tla: str) -> set[str]:
    """The actions of ``Next``: definitions reachable from it that assign a primed
    variable. Composites (``Writer``, ``Reader(r)``), ``Done`` (pure stutter),
    invariants, properties and helpers are not protocol actions."""
    defs = tla_definitions(tla)
    if "Next" not in defs:
        raise AssertionError("the spec defines no Next")
    seen: set[str] = set()
    todo = ["Next"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [i for i in _IDENT.findall(defs[name]) if i in defs and i not in seen]
    return {n for n in seen if n != "Next" and _PRIMED.search(defs[n])}


def test_parser_on_a_toy_spec() -> None:
    toy = """
    ---- MODULE Toy ----
    VARIABLES x
    Init == x = 0
    Inc == x' = x + 1   \\* an action
    Reset(k) == /\\ x > k
                /\\ x' = 0
    Stay == UNCHANGED x
    (* Unused == x' = 7 *)
    Helper(y) == y + 1
    Next == Inc \\/ \\E k \\in 1..2 : Reset(k) \\/ Stay
    TypeOK == x \\in Nat
    ====
    """
    assert protocol_actions(toy.replace("\n    ", "\n")) == {"Inc", "Reset"}


def test_steps_match_spec_actions() -> None:
    if not SPEC.exists():
        pytest.skip(f"{SPEC.relative_to(ROOT)} does not exist yet")
    actions = protocol_actions(SPEC.read_text())
    assert set(steps.ALL_STEPS) == actions, (
        f"only in steps.py: {sorted(set(steps.ALL_STEPS) - actions)}; "
        f"only in the spec: {sorted(actions - set(steps.ALL_STEPS))}"
    )


def test_steps_are_unique_and_split_by_actor() -> None:
    assert len(set(steps.ALL_STEPS)) == len(steps.ALL_STEPS)
    assert set(steps.WRITER_STEPS) | set(steps.READER_STEPS) == set(steps.ALL_STEPS)
    assert all(s.startswith("Writer") for s in steps.WRITER_STEPS)
    assert all(s.startswith("Reader") for s in steps.READER_STEPS)


def test_every_step_has_a_code_site_in_ring_py() -> None:
    sites = set(re.findall(r"#\s*spec:\s*(\w+)", RING_PY.read_text()))
    assert set(steps.ALL_STEPS) <= sites, f"no `# spec:` site for {set(steps.ALL_STEPS) - sites}"
    unknown = sites - set(steps.ALL_STEPS)
    assert not unknown, f"`# spec:` names not in steps.py: {unknown}"


def test_ring_machine_rules_are_the_steps() -> None:
    # hypothesis marks each @rule method with this attribute (initialize rules differ)
    rules = {
        name
        for name, member in vars(RingMachine).items()
        if getattr(member, "hypothesis_stateful_rule", None) is not None
    }
    assert rules == set(steps.ALL_STEPS), (
        f"rules without a step: {rules - set(steps.ALL_STEPS)}; "
        f"steps without a rule: {set(steps.ALL_STEPS) - rules}"
    )
