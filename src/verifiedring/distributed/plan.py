"""Compiled path refill: :class:`RefillPlan` and :class:`PlanCache`.

A plan compiles the accessors of one fixed structure once (generated getter and
setter functions), so a step costs one attribute/item access per leaf and
tensor instead of the typed walk of :mod:`verifiedring.distributed.paths`;
``bench/path_refill.py`` measures it.
"""

from __future__ import annotations

import keyword
import uuid
from collections.abc import Callable
from typing import Any

import torch

from ..errors import MisuseError
from .paths import (
    ATTR,
    INDEX,
    KEY,
    LEAF,
    Path,
    _Collector,
    _make_tuple,
    format_path,
)
from .transfer import TensorMeta


def structure_of(nodes: list[tuple[Any, ...]]) -> tuple[tuple[Any, ...], ...]:
    """The nodes without leaf values: equal for two objects a plan fits alike."""
    return tuple((LEAF,) if n[0] == LEAF else n for n in nodes)


def _get_path(root: Any, path: Path) -> Any:
    x = root
    for kind, k in path:
        x = getattr(x, k) if kind == ATTR else x[k]
    return x


def _set_path(root: Any, path: Path, value: Any) -> Any:
    """Set ``value`` at ``path``; tuples on the way are rebuilt. Returns the root."""
    if not path:
        return value
    parent = _get_path(root, path[:-1])
    kind, k = path[-1]
    if isinstance(parent, tuple):
        items = list(parent)
        items[k] = value
        return _set_path(root, path[:-1], _make_tuple(type(parent), items))
    if kind == ATTR:
        object.__setattr__(parent, k, value)
    else:
        parent[k] = value
    return root


class RefillPlan:
    """Compiled accessors of one fixed structure: per step, one access per leaf/tensor.

    Compile it from an object (``RefillPlan(obj)``); ``collect`` reads the leaves
    and tensors of any object of that structure, ``apply`` writes leaves back and
    returns the destination tensors (reallocated and set at every path the
    sender's tensor is reached from, when its dtype/shape/device type changed).
    The structure (containers, keys, lengths, classes, aliasing) must not change
    while the plan is used; when it does, a missing path raises MisuseError naming
    it, but an *added* key is silently not sent -- compile a new plan (a new plan
    carries a new ``token``, and receivers then re-check the structure).
    """

    def __init__(self, obj: Any) -> None:
        c = _Collector(record_paths=True)
        c.visit(obj)
        self.token = uuid.uuid4().hex
        self.structure = structure_of(c.nodes)
        self.leaf_paths = [p for p, _ in c.leaf_sites]
        self.tensor_paths = [[p for p, _ in sites] for sites in c.tensor_sites]
        consts: dict[str, Any] = {"_osa": object.__setattr__}
        getters = ", ".join(_expr(p, consts) for p in self.leaf_paths)
        tgetters = ", ".join(_expr(sites[0], consts) for sites in self.tensor_paths)
        setters: list[str] = []
        self._slow: list[tuple[int, Path]] = []
        for i, (p, parent) in enumerate(c.leaf_sites):
            if not p or isinstance(parent, tuple):
                self._slow.append((i, p))
                continue
            kind, k = p[-1]
            pe = _expr(p[:-1], consts)
            if kind == ATTR:
                if type(parent).__dataclass_params__.frozen:
                    setters.append(f"_osa({pe}, {k!r}, L[{i}])")
                else:
                    setters.append(f"{pe}.{k} = L[{i}]")
            else:
                setters.append(f"{pe}[{_expr_key(kind, k, consts)}] = L[{i}]")
        src = (
            f"def _leaves(r):\n    return [{getters}]\n"
            f"def _tensors(r):\n    return [{tgetters}]\n"
            "def _set(r, L):\n    " + "\n    ".join([*setters, "pass"]) + "\n"
        )
        exec(compile(src, "<RefillPlan>", "exec"), consts)
        self._leaves: Callable[[Any], list[Any]] = consts["_leaves"]
        self._tensors: Callable[[Any], list[torch.Tensor]] = consts["_tensors"]
        self._set: Callable[[Any, list[Any]], None] = consts["_set"]

    def _resolve_all(self, obj: Any) -> Any:
        """Raise MisuseError naming the first path ``obj`` lacks."""
        for path in [*self.leaf_paths, *(s[0] for s in self.tensor_paths)]:
            x = obj
            for n, (kind, k) in enumerate(path):
                try:
                    x = getattr(x, k) if kind == ATTR else x[k]
                except (LookupError, AttributeError, TypeError) as e:
                    raise MisuseError(
                        f"refill plan: {format_path(path[: n + 1])} is missing in the object "
                        f"({type(e).__name__}: {e}); the structure changed, compile a new plan"
                    ) from e
        return None

    def collect(self, obj: Any) -> tuple[list[Any], list[torch.Tensor]]:
        """The leaves and tensors of ``obj``, in plan order."""
        try:
            return self._leaves(obj), self._tensors(obj)
        except (LookupError, AttributeError, TypeError):
            self._resolve_all(obj)
            raise

    def apply(
        self, obj: Any, leaves: list[Any], metas: list[TensorMeta]
    ) -> tuple[Any, list[torch.Tensor]]:
        """Write ``leaves`` into ``obj``; return the root and the destination tensors."""
        if len(leaves) != len(self.leaf_paths) or len(metas) != len(self.tensor_paths):
            raise MisuseError(
                f"refill plan: got {len(leaves)} leaves and {len(metas)} tensors, the plan "
                f"has {len(self.leaf_paths)} and {len(self.tensor_paths)}"
            )
        try:
            self._set(obj, leaves)
            current = self._tensors(obj)
        except (LookupError, AttributeError, TypeError):
            self._resolve_all(obj)
            raise
        root = obj
        for i, path in self._slow:
            root = _set_path(root, path, leaves[i])
        dests = current
        for j, (meta, t) in enumerate(zip(metas, current, strict=True)):
            if not meta.matches(t):
                dests[j] = meta.empty()
                for path in self.tensor_paths[j]:
                    root = _set_path(root, path, dests[j])
        return root, dests


def _expr_key(kind: int, k: Any, consts: dict[str, Any]) -> str:
    if kind == INDEX:
        return str(int(k))
    name = f"K{len(consts)}"
    consts[name] = k
    return name


def _expr(path: Path, consts: dict[str, Any]) -> str:
    s = "r"
    for kind, k in path:
        if kind == ATTR:
            if isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k):
                s += f".{k}"
            else:
                s = f"getattr({s}, {_expr_key(KEY, k, consts)})"
        else:
            s += f"[{_expr_key(kind, k, consts)}]"
    return s


class PlanCache:
    """Holds one call site's :class:`RefillPlan` across steps of ``broadcast_nested``.

    The sender compiles its plan on first use and sends the full Refill once
    with the plan's token; a receiver refills by walking that once, compiles its
    own plan from the result and checks the two structures are equal. Later
    steps carry only the token, the leaves and the tensor metas.
    ``reset()`` drops the plan (call it after changing the structure).
    """

    def __init__(self) -> None:
        self.plan: RefillPlan | None = None
        self.peer_token: str | None = None

    def reset(self) -> None:
        self.plan = None
        self.peer_token = None
