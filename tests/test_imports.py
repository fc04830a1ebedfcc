"""The direction of the imports in ``src/verifiedring``, read from the AST.

Every module belongs to one layer (``LAYERS``, explicit: a new module fails until it is
placed). A module imports only from its own layer and the layers below it; an import
upward is allowed only where ``UPWARD`` names it with its reason (a named factory).
Every import counts: at module level, inside a function and under ``TYPE_CHECKING``.
Also: no module of ``src`` imports the tests, and no module imports another module's
``_private`` name (``PRIVATE`` lists the exceptions, each with its reason). Each allow
list expires: an entry that no longer matches an import fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "verifiedring"

#: The layers, lowest first; each module imports only from its own layer and below.
ORDER = ("ground", "ring", "queue base", "flavors", "roles", "entry", "distributed",
         "compat", "tools")
_GROUND = ("cgroup", "engine", "errors", "hosts", "hugepages", "layout", "leftovers",
           "ordering", "pace", "reservation", "shm", "steps", "waiting", "__main__")
_RING = ("arena", "cursor_base", "cursors", "leases", "native", "ring")
_QUEUE_BASE = ("ages", "credit", "curve", "handle", "lifecycle", "message_queue", "outcomes",
               "peers", "serialization", "sockets", "wire")
_ROLES = ("held_chunk", "local_path", "local_reader", "reader", "reader_path", "reader_waits",
          "readiness", "remote_link", "remote_path", "remote_reader", "transmitters", "writer",
          "writer_control", "writer_parts", "writer_path", "writer_cuts", "writer_watch")
#: module (dotted, under verifiedring; "" is the package) -> its layer
LAYERS: dict[str, str] = {
    **{m: "ground" for m in _GROUND},
    **{m: "ring" for m in _RING},
    **{f"queue.{m}": "queue base" for m in _QUEUE_BASE},
    **{f"queue.flavors.{m}": "flavors" for m in ("__init__", "control", "overflow")},
    **{f"queue.flavors.run.{m}": "flavors" for m in ("__init__", "reader", "receiver", "writer")},
    **{f"queue.{m}": "roles" for m in _ROLES},
    "__init__": "entry",
    "queue.__init__": "entry",
    **{f"distributed.{m}": "distributed" for m in (
        "__init__", "broadcaster", "group", "paths", "plan", "transfer", "workers")},
    "dist": "distributed",
    **{f"compat.{m}": "compat" for m in (
        "__init__", "attributes", "logs", "spin", "tensor_arena", "vllm")},
    **{f"testing.{m}": "tools" for m in (
        "__init__", "blocked", "faults", "launcher", "multihost", "namespace_init",
        "namespaces", "ns_host", "probe", "queue_runs", "queue_trace", "replay", "samples",
        "sandbox", "scheduler", "tlc", "trace", "trace_runs", "tracelog")},
}
#: (importer, imported) -> why this upward import is allowed
UPWARD: dict[tuple[str, str], str] = {
    ("queue.message_queue", "queue.writer"):
        "core_roles(), the named factory of MessageQueue(...) (imported at call time)",
    ("queue.message_queue", "queue.local_reader"):
        "core_roles(), the named factory of create_from_handle (imported at call time)",
    ("queue.message_queue", "queue.remote_reader"):
        "core_roles(), the named factory of create_from_handle (imported at call time)",
    ("queue.message_queue", "distributed.group"):
        "MessageQueue.create_from_process_group*, vLLM's torch-layer factories (call time)",
}
#: (importer, imported module, name) -> why importing this _private name is allowed
PRIVATE: dict[tuple[str, str, str], str] = {
    ("compat.vllm", "compat.tensor_arena", "_ARENA_MIN_BYTES"):
        "vLLM's own underscored name, re-exported under it",
    ("compat.vllm", "compat.tensor_arena", "_TENSOR_ARENAS"):
        "vLLM's own underscored name, re-exported under it",
    ("compat.vllm", "compat.tensor_arena", "_ArenaPickler"):
        "vLLM's own underscored name, re-exported under it",
    ("distributed.paths", "distributed.transfer", "_copy_bytes_into"):
        "pending: a helper the torch layer's modules share, to be named public",
    ("distributed.plan", "distributed.paths", "_Collector"):
        "pending: a helper the torch layer's modules share, to be named public",
    ("distributed.plan", "distributed.paths", "_make_tuple"):
        "pending: a helper the torch layer's modules share, to be named public",
    ("testing.samples", "distributed.paths", "_kind"):
        "pending: the sample tool reads the torch layer's kind rule, to be named public",
}


#: The test tree's top-level names (src never imports them).
_TESTS = ("tests", "support", "conftest")


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts)


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    """The dotted module (under verifiedring) a ``from`` import reads from ("" = other)."""
    if node.level == 0:
        name = node.module or ""
        return name.removeprefix("verifiedring.") if name.startswith("verifiedring.") else (
            "__init__" if name == "verifiedring" else "")
    package = importer.split(".")[:-1]  # a module's package (for __init__ too)
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *(node.module or "").split(".")]).strip(".") or "__init__"


def _known(name: str) -> str | None:
    """``name`` as a key of LAYERS (a package is its ``__init__``), or None."""
    for key in (name, f"{name}.__init__" if name != "__init__" else name):
        if key in LAYERS:
            return key
    return None


def _from_import(me: str, node: ast.ImportFrom) -> list[tuple[str, str, list[str]]]:
    """What one ``from`` import of module ``me`` reads, as :func:`imports` lists it."""
    names = [a.name for a in node.names]
    if node.level == 0 and (node.module or "").split(".")[0] in _TESTS:
        return [(me, f"tests:{node.module}", names)]
    target = _resolve(me, node)
    package = "" if target == "__init__" else target
    sub = [_known(f"{package}.{n}".strip(".")) for n in names]
    if target and all(sub):  # `from . import engine`: the modules themselves
        return [(me, s, []) for s in sub if s is not None]
    return [(me, _known(target) or target, names)] if target else []


def imports() -> list[tuple[str, str, list[str]]]:
    """Every (importer, imported module, names) in src, modules as LAYERS keys; an
    import of the test tree as ``tests:<name>``."""
    found: list[tuple[str, str, list[str]]] = []
    for path in sorted(SRC.rglob("*.py")):
        me = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                found.extend(_from_import(me, node))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("verifiedring"):
                        inner = alias.name.removeprefix("verifiedring").strip(".") or "__init__"
                        found.append((me, _known(inner) or inner, []))
                    elif alias.name.split(".")[0] in _TESTS:
                        found.append((me, f"tests:{alias.name}", []))
    return found


def test_every_module_has_a_layer() -> None:
    modules = {_module_name(p) for p in SRC.rglob("*.py")}
    assert sorted(modules - LAYERS.keys()) == [], "place these modules in LAYERS"
    assert sorted(LAYERS.keys() - modules) == [], "these LAYERS entries are gone"


def test_no_import_goes_up_a_layer_outside_the_named_factories() -> None:
    rank = {layer: i for i, layer in enumerate(ORDER)}
    upward: set[tuple[str, str]] = set()
    for importer, imported, _ in imports():
        if imported in LAYERS and rank[LAYERS[imported]] > rank[LAYERS[importer]]:
            upward.add((importer, imported))
    listing = "\n".join(f"  {a} ({LAYERS[a]}) -> {b} ({LAYERS[b]})" for a, b in sorted(upward))
    assert not upward - UPWARD.keys(), f"imports going up a layer:\n{listing}"
    assert sorted(UPWARD.keys() - upward) == [], "UPWARD entries no longer imported"


def test_src_never_imports_the_tests() -> None:
    assert [(a, b) for a, b, _ in imports() if b.startswith("tests:")] == []


def test_no_module_imports_another_modules_private_name() -> None:
    private = {
        (importer, imported, name)
        for importer, imported, names in imports() if imported in LAYERS
        for name in names
        if name.startswith("_") and not name.startswith("__") and imported != importer
    }
    assert sorted(private - PRIVATE.keys()) == []
    assert sorted(PRIVATE.keys() - private) == [], "PRIVATE entries no longer imported"
