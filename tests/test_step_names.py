"""One name per protocol step: steps.py == spec actions == `# spec:` sites == machine rules.

For the ring (``spec/ring/RingBuffer.tla``) and the queue (``spec/queue/MessageQueue.tla``): the
names in ``steps.py`` are exactly the spec's actions; each has exactly one ``# spec:``
site in its code; the stateful machines' rules (read from the test sources, not
imported) drive every action.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support.spec_names import protocol_actions, spec_sites

from verifiedring import steps

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "verifiedring"
RING_SPEC = ROOT / "spec" / "ring" / "RingBuffer.tla"
QUEUE_SPEC = ROOT / "spec" / "queue" / "MessageQueue.tla"
SLEEP_SPEC = ROOT / "spec" / "sleep" / "ReaderSleep.tla"
WAKE_SPEC = ROOT / "spec" / "sleep" / "ReaderWake.tla"
RING_CODE = [SRC / "cursors.py", SRC / "leases.py"]
WAKE_CODE = [SRC / "cursors.py", SRC / "cursor_base.py"]
QUEUE_CODE = sorted((SRC / "queue").rglob("*.py"))


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
    Zero == x' = 0
    Wrap == x > 5 /\\ Zero /\\ y' = y
    Next == Inc \\/ \\E k \\in 1..2 : Reset(k) \\/ Stay \\/ Wrap
    TypeOK == x \\in Nat
    ====
    """
    assert protocol_actions(toy.replace("\n    ", "\n")) == {"Inc", "Reset", "Wrap"}


def machine_rules(test_file: str, machine: str) -> tuple[set[str], dict[str, tuple[str, ...]]]:
    """The ``@rule`` methods of class ``machine`` in ``tests/<test_file>`` and its
    ``ACTIONS`` table (empty if it has none), read from the source."""
    tree = ast.parse((ROOT / "tests" / test_file).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == machine)
    rules: set[str] = set()
    actions: dict[str, tuple[str, ...]] = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if isinstance(target, ast.Name) and target.id == "rule":
                    rules.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        value = getattr(node, "value", None)
        named = any(isinstance(t, ast.Name) and t.id == "ACTIONS" for t in targets)
        if value is not None and named:
            actions = ast.literal_eval(value)
    return rules, actions


RING = (RING_SPEC, steps.ALL_STEPS, RING_CODE)
SLEEP = (SLEEP_SPEC, steps.SLEEP_STEPS, RING_CODE)
QUEUE = (QUEUE_SPEC, steps.QUEUE_STEPS, QUEUE_CODE)
WAKE = (WAKE_SPEC, steps.WAKE_STEPS, WAKE_CODE)
#: ReaderWake.tla's steps that are other models' (ReaderSleep's release; the queue's
#: SHUTDOWN; the queue's raise at SHUTDOWN, BROKEN or cancel, seen and then leaving).
#: And ZeroMQ's delivery of a sent frame (FrameArrive): no code's step.
WAKE_ELSEWHERE = {"ReaderReleaseW", "ReaderPoll", "WriterShutdown", "ReaderSeeStop", "ReaderLeave",
                  "FrameArrive"}
#: ReaderSleep.tla's steps that are no code's: a store buffer draining (relaxed memory).
SLEEP_MEMORY_STEPS = {"WriterFlush", "ReaderFlush"}
#: ... and the ring steps it abstracts (their code sites are RingBuffer.tla's).
SLEEP_RING_STEPS = {"WriterPublish", "ReaderPollWritten", "ReaderRelease"}


@pytest.mark.parametrize(("spec", "names", "code"), [RING, QUEUE], ids=["ring", "queue"])
def test_steps_match_spec_actions(spec: Path, names: tuple[str, ...], code: list[Path]) -> None:
    actions = protocol_actions(spec.read_text())
    assert set(names) == actions, (
        f"only in steps.py: {sorted(set(names) - actions)}; "
        f"only in the spec: {sorted(actions - set(names))}"
    )


def test_sleep_steps_match_the_sleep_spec() -> None:
    actions = protocol_actions(SLEEP_SPEC.read_text())
    assert SLEEP_RING_STEPS.issubset(steps.ALL_STEPS)
    own = actions - SLEEP_MEMORY_STEPS - SLEEP_RING_STEPS
    assert set(steps.SLEEP_STEPS) == own, (
        f"only in steps.py: {sorted(set(steps.SLEEP_STEPS) - own)}; "
        f"only in the spec: {sorted(own - set(steps.SLEEP_STEPS))}"
    )
    assert len(set(steps.SLEEP_STEPS)) == len(steps.SLEEP_STEPS)
    assert not set(steps.SLEEP_STEPS) & set(steps.ALL_STEPS)


def test_wake_steps_match_the_wake_spec() -> None:
    actions = protocol_actions(WAKE_SPEC.read_text(), "WakeNext")
    assert "WriterShutdown" in steps.QUEUE_STEPS
    own = actions - WAKE_ELSEWHERE
    assert set(steps.WAKE_STEPS) == own, (
        f"only in steps.py: {sorted(set(steps.WAKE_STEPS) - own)}; "
        f"only in the spec: {sorted(own - set(steps.WAKE_STEPS))}"
    )
    assert not set(steps.WAKE_STEPS) & (set(steps.ALL_STEPS) | set(steps.SLEEP_STEPS))


def test_steps_are_unique_and_split_by_actor() -> None:
    assert len(set(steps.ALL_STEPS)) == len(steps.ALL_STEPS)
    assert len(set(steps.QUEUE_STEPS)) == len(steps.QUEUE_STEPS)
    assert set(steps.WRITER_STEPS) | set(steps.READER_STEPS) == set(steps.ALL_STEPS)
    assert all(s.startswith("Writer") for s in steps.WRITER_STEPS)
    assert all(s.startswith("Reader") for s in steps.READER_STEPS)


@pytest.mark.parametrize(
    ("spec", "names", "code"), [RING, SLEEP, QUEUE, WAKE], ids=["ring", "sleep", "queue", "wake"]
)
def test_every_step_has_exactly_one_code_site(
    spec: Path, names: tuple[str, ...], code: list[Path]
) -> None:
    sites = spec_sites(code)
    missing = set(names) - set(sites)
    assert not missing, f"no `# spec:` site for {sorted(missing)}"
    known = {
        n for _, more, where in (RING, SLEEP, QUEUE, WAKE) if set(where) & set(code)
        for n in more
    }
    unknown = set(sites) - known
    assert not unknown, f"`# spec:` names not in steps.py: {sorted(unknown)}"
    repeated = {n: c for n, c in sites.items() if c > 1}
    assert not repeated, f"actions with more than one `# spec:` site: {repeated}"


def test_ring_machine_rules_are_the_steps() -> None:
    rules, _ = machine_rules("test_ring_stateful.py", "RingMachine")
    names = set(steps.ALL_STEPS) | set(steps.SLEEP_STEPS)
    assert rules == names, (
        f"rules without a step: {rules - names}; steps without a rule: {names - rules}"
    )


#: The queue's machines: whole calls (each rule naming the actions it fires), and one
#: spec action per rule, writer and reader in threads (each rule fires its own action).
QUEUE_MACHINES = (
    ("test_queue_stateful.py", "QueueMachine"),
    ("test_queue_stateful.py", "RunMachine"),
    ("test_queue_steps.py", "RunStepMachine"),
    ("test_overflow_steps.py", "OverflowStepMachine"),
    ("test_remote_steps.py", "RemoteStepMachine"),
)


def test_queue_machines_drive_every_queue_action() -> None:
    """QueueMachine (socket overflow, remote reader), RunMachine (runs),
    RunStepMachine (runs, step by step), OverflowStepMachine (overflow frames, step
    by step) and RemoteStepMachine (the remote reader, step by step) together."""
    driven: set[str] = set()
    for test_file, machine in QUEUE_MACHINES:
        rules, actions = machine_rules(test_file, machine)
        protocol_rules = {r for r in rules if r[0].isupper()}  # lower-case: the environment
        assert protocol_rules <= set(steps.QUEUE_STEPS), protocol_rules - set(steps.QUEUE_STEPS)
        for rule_name in protocol_rules:
            assert actions.get(rule_name, ())[:1] == (rule_name,), f"ACTIONS[{rule_name!r}]"
        assert set(actions) - {"__init__"} == protocol_rules
        driven |= {a for acts in actions.values() for a in acts}
    assert driven == set(steps.QUEUE_STEPS), (
        f"not driven: {sorted(set(steps.QUEUE_STEPS) - driven)}; "
        f"not actions: {sorted(driven - set(steps.QUEUE_STEPS))}"
    )


@pytest.mark.parametrize(("test_file", "machine"), QUEUE_MACHINES[2:],
                         ids=["runs", "overflow", "remote"])
def test_step_machine_rules_fire_one_action_each(test_file: str, machine: str) -> None:
    """RunStepMachine, OverflowStepMachine, RemoteStepMachine: every protocol rule drives
    exactly its own action (the machine checks at each grant that the step which ended
    is the one its rule named)."""
    rules, actions = machine_rules(test_file, machine)
    protocol_rules = {r for r in rules if r[0].isupper()}
    assert actions == {r: (r,) for r in protocol_rules}


ARENA_SPEC = ROOT / "spec" / "arena" / "TensorArena.tla"
ARENA_CODE = [SRC / "arena.py"]


def test_arena_steps_are_the_spec_actions_with_one_code_site_each() -> None:
    """TensorArena.tla's actions are ARENA_STEPS plus the queue's own (``Queue*``);
    each arena step has exactly one ``# spec:`` site, in arena.py."""
    actions = protocol_actions(ARENA_SPEC.read_text())
    arena = {a for a in actions if not a.startswith("Queue")}
    assert set(steps.ARENA_STEPS) == arena, (
        f"only in steps.py: {sorted(set(steps.ARENA_STEPS) - arena)}; "
        f"only in the spec: {sorted(arena - set(steps.ARENA_STEPS))}"
    )
    assert len(set(steps.ARENA_STEPS)) == len(steps.ARENA_STEPS)
    sites = spec_sites(ARENA_CODE)
    assert dict(sites) == dict.fromkeys(steps.ARENA_STEPS, 1), dict(sites)
    assert not set(spec_sites(QUEUE_CODE)) & set(steps.ARENA_STEPS)
