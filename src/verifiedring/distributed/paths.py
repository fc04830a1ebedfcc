"""Path refill: broadcast nested metadata into a receiver's object of the same shape.

The sender walks its object (:func:`collect`) and produces a :class:`Refill` --
a preorder list of nodes, one per container, leaf and tensor -- plus its tensors
in the same stable order. The receiver walks *its own* object alongside the
nodes (:func:`apply`): each leaf is written back at its path, each tensor is
received into the receiver's tensor at that path. Paths are typed: a dict key is
the key object itself (``128`` stays an int, ``"a.b"`` and ``(1, 2)`` are single
steps), an attribute is a dataclass field name, an index is an int.

What is a container
    ``dict`` and its subclasses (a ``defaultdict`` keeps its ``default_factory``,
    which must be picklable), ``list`` and its subclasses, dataclass instances,
    and tuples (incl. namedtuples) that hold a tensor or a container somewhere
    inside. Everything else is a **leaf** and is sent whole (pickled): numbers,
    strings, ``None``, sets, numpy arrays, and tuples made only of leaves.

Rules of the refill (the sender's object is authoritative)
    * A leaf (incl. ``None``) always replaces what the receiver has at its path.
    * A container node is filled into the receiver's object of the same class at
      that path, in place. Where the receiver has nothing (a missing dict key, a
      list that is too short) or a leaf (e.g. ``None``), a new container is made:
      ``cls()``, ``defaultdict(factory)``, or for a dataclass ``cls.__new__`` plus
      its fields (as pickle does: ``__init__`` is not called). Dicts end with the
      sender's keys in the sender's order (extra keys are removed); lists end with
      the sender's length.
    * Where the receiver has a dict or list of another class (``dict`` where the
      sender has a ``defaultdict``), a new one of the sender's class replaces it.
      Where it has a container or tensor of another kind (a list for a dict, a
      dataclass of another class, a tensor for a container or the reverse), the
      structures disagree: :class:`~verifiedring.errors.MisuseError` naming the path.
    * A tensor is received in place when the receiver's tensor at the path has the
      sender's dtype, shape and device type; otherwise (a different tensor, a
      leaf, nothing) a new one is allocated with ``torch.empty`` on this rank's
      device of that type and put at the path.
    * Tuples are immutable: a tuple is rebuilt (same class) and replaced in its
      parent when any item changes; a tuple at the root makes :func:`apply`
      return a new root, so always use its return value.
    * An object reached twice (shared reference or cycle) is visited once; the
      receiver ends up with the same aliasing as the sender (a later reference is
      set to the object placed at the first one, and a receiver object reached
      twice where the sender has two distinct objects is split by making a new
      one). A cycle through a tuple that has to be rebuilt cannot be refilled
      (MisuseError), as a tuple cannot contain itself before it exists.

:class:`~verifiedring.distributed.plan.RefillPlan` compiles the accessors of a
fixed structure once, so a step costs one access per leaf and tensor instead of
a typed walk.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import MisuseError
from .transfer import TensorMeta, _copy_bytes_into, as_bytes

# Node kinds of a Refill (first item of each node tuple).
LEAF, TENSOR, REF, DICT, LIST, TUPLE, DATACLASS = range(7)
# Path step kinds: (ATTR, field name), (KEY, dict key), (INDEX, list/tuple index).
ATTR, KEY, INDEX = range(3)

Step = tuple[int, Any]
Path = tuple[Step, ...]

_SCALARS: frozenset[type] = frozenset({int, float, str, bytes, bool, type(None), complex})
_MISSING: Any = object()


def format_path(path: Sequence[Step]) -> str:
    """``obj.meta[128]['a.b'][(1, 2)][3]``: attributes by name, keys and indices by repr."""
    parts = ["obj"]
    for kind, k in path:
        parts.append(f".{k}" if kind == ATTR else f"[{k!r}]")
    return "".join(parts)


def _kind(x: Any) -> int:
    """The node kind of a non-scalar, non-tensor value."""
    if isinstance(x, dict):
        return DICT
    if isinstance(x, list):
        return LIST
    if isinstance(x, tuple):
        return LEAF if all(_is_leaf(i) for i in x) else TUPLE
    if not isinstance(x, type) and dataclasses.is_dataclass(x):
        return DATACLASS
    return LEAF


def _is_leaf(x: Any) -> bool:
    return type(x) in _SCALARS or (not isinstance(x, torch.Tensor) and _kind(x) == LEAF)


def _is_structural(x: Any) -> bool:
    return x is not _MISSING and not _is_leaf(x)


def _make_tuple(cls: type, items: list[Any]) -> tuple[Any, ...]:
    if cls is tuple:
        return tuple(items)
    if hasattr(cls, "_fields"):  # namedtuple
        return cls(*items)  # type: ignore[no-any-return]
    return cls(items)  # type: ignore[no-any-return]


@dataclass
class Refill:
    """The sender's side of a path refill: preorder nodes and tensor metas (picklable)."""

    nodes: list[tuple[Any, ...]]
    metas: list[TensorMeta]


class _Collector:
    """The sender's walk. With ``record_paths`` it also notes where each leaf and tensor is."""

    def __init__(self, record_paths: bool = False) -> None:
        self.nodes: list[tuple[Any, ...]] = []
        self.tensors: list[torch.Tensor] = []
        self.metas: list[TensorMeta] = []
        self.seen: dict[int, int] = {}
        self.record_paths = record_paths
        self.path: list[Step] = []
        self.parents: list[Any] = []
        # (path, parent object) per leaf and per tensor; the refs to each tensor.
        self.leaf_sites: list[tuple[Path, Any]] = []
        self.tensor_sites: list[list[tuple[Path, Any]]] = []

    def _site(self) -> tuple[Path, Any]:
        return tuple(self.path), (self.parents[-1] if self.parents else None)

    def visit(self, x: Any) -> None:
        kind = (
            LEAF if type(x) in _SCALARS  # the common leaf: no kind lookup
            else TENSOR if isinstance(x, torch.Tensor) else _kind(x)
        )
        if kind == LEAF:
            self.nodes.append((LEAF, x))
            if self.record_paths:
                self.leaf_sites.append(self._site())
            return
        j = self.seen.get(id(x))
        if j is not None:
            self._ref(j)
            return
        self.seen[id(x)] = len(self.nodes)
        if kind == TENSOR:
            self._tensor(x)
        else:
            self._container(kind, x)

    def _ref(self, j: int) -> None:
        """A second reference to the object first seen at node ``j``."""
        nodes = self.nodes
        nodes.append((REF, j))
        if self.record_paths and nodes[j][0] == TENSOR:
            self.tensor_sites[nodes[j][1]].append(self._site())

    def _tensor(self, x: torch.Tensor) -> None:
        self.nodes.append((TENSOR, len(self.tensors)))
        self.tensors.append(x)
        self.metas.append(TensorMeta.of(x))
        if self.record_paths:
            self.tensor_sites.append([self._site()])

    def _container(self, kind: int, x: Any) -> None:
        """A dict, dataclass, list or tuple: its node, then its children in order."""
        nodes = self.nodes
        self.parents.append(x)
        path = self.path
        if kind == DICT:
            keys = tuple(x)
            factory = x.default_factory if isinstance(x, defaultdict) else None
            nodes.append((DICT, type(x), factory, keys))
            path.append((KEY, None))
            for k in keys:
                path[-1] = (KEY, k)
                self.visit(dict.__getitem__(x, k))
        elif kind == DATACLASS:
            names = tuple(f.name for f in dataclasses.fields(x))
            nodes.append((DATACLASS, type(x), names))
            path.append((ATTR, None))
            for name in names:
                path[-1] = (ATTR, name)
                self.visit(getattr(x, name))
        else:  # LIST or TUPLE
            nodes.append((kind, type(x), len(x)))
            path.append((INDEX, 0))
            for i, item in enumerate(x):
                path[-1] = (INDEX, i)
                self.visit(item)
        path.pop()
        self.parents.pop()


def collect(obj: Any) -> tuple[Refill, list[torch.Tensor]]:
    """The sender's walk: the Refill to send and the tensors to broadcast, in order."""
    c = _Collector()
    c.visit(obj)
    return Refill(c.nodes, c.metas), c.tensors


class _Applier:
    def __init__(self, refill: Refill) -> None:
        self.nodes = refill.nodes
        self.metas = refill.metas
        self.pos = 0
        self.placed: list[Any] = [None] * len(self.nodes)
        self.pending_tuples: dict[int, bool] = {}
        self.claimed: set[int] = set()
        self.keep: list[Any] = []  # replaced receiver objects stay alive: their ids stay unique
        self.dests: list[torch.Tensor | None] = [None] * len(self.metas)
        self.path: list[Step] = []

    def fail(self, what: str) -> MisuseError:
        return MisuseError(f"path refill at {format_path(self.path)}: {what}")

    def reuse(self, cur: Any, cls: type, kind: int, what: str) -> Any:
        """The receiver's container to fill in place, or None to make a new one."""
        if type(cur) is cls:
            if id(cur) in self.claimed:
                return None  # reached twice here, distinct on the sender: split
            self.claimed.add(id(cur))
            return cur
        if _is_structural(cur) and (
            kind == DATACLASS or isinstance(cur, torch.Tensor) or _kind(cur) != kind
        ):
            raise self.fail(
                f"the sender has {what} {cls.__qualname__}, the receiver a {type(cur).__qualname__}"
            )
        return None

    def node(self, cur: Any) -> Any:
        i = self.pos
        self.pos += 1
        rec = self.nodes[i]
        kind = rec[0]
        if kind == LEAF:
            return rec[1]
        if kind == REF:
            j = rec[1]
            if j in self.pending_tuples:
                self.pending_tuples[j] = True
            return self.placed[j]
        if kind == TENSOR:
            return self.fill_tensor(i, rec[1], cur)
        if kind == DICT:
            return self.fill_dict(i, rec, cur)
        if kind == LIST:
            return self.fill_list(i, rec, cur)
        if kind == TUPLE:
            return self.fill_tuple(i, rec, cur)
        return self.fill_dataclass(i, rec, cur)

    def fill_tensor(self, i: int, index: int, cur: Any) -> torch.Tensor:
        meta = self.metas[index]
        if isinstance(cur, torch.Tensor) and meta.matches(cur) and id(cur) not in self.claimed:
            t = cur
        else:
            if _is_structural(cur) and not isinstance(cur, torch.Tensor):
                raise self.fail(f"the sender has a tensor, the receiver a {type(cur).__qualname__}")
            t = meta.empty()
            self.keep.append(cur)
        self.claimed.add(id(t))
        self.dests[index] = t
        self.placed[i] = t
        return t

    def fill_dict(self, i: int, rec: tuple[Any, ...], cur: Any) -> dict[Any, Any]:
        _, cls, factory, keys = rec
        d = self.reuse(cur, cls, DICT, "a dict")
        if d is None:
            self.keep.append(cur)
            d = cls(factory) if factory is not None else cls()
            self.claimed.add(id(d))
        elif factory is not None and d.default_factory is not factory:
            d.default_factory = factory
        self.placed[i] = d
        path = self.path
        path.append((KEY, None))
        for k in keys:
            path[-1] = (KEY, k)
            old = dict.get(d, k, _MISSING)
            new = self.node(old)
            if new is not old:
                d[k] = new
        path.pop()
        if len(d) != len(keys) or tuple(d) != keys:
            items = [(k, dict.__getitem__(d, k)) for k in keys]
            d.clear()
            d.update(items)
        return d  # type: ignore[no-any-return]

    def fill_list(self, i: int, rec: tuple[Any, ...], cur: Any) -> list[Any]:
        _, cls, n = rec
        lst = self.reuse(cur, cls, LIST, "a list")
        if lst is None:
            self.keep.append(cur)
            lst = cls()
            self.claimed.add(id(lst))
        self.placed[i] = lst
        if len(lst) > n:
            del lst[n:]
        path = self.path
        path.append((INDEX, 0))
        for j in range(n):
            path[-1] = (INDEX, j)
            if j < len(lst):
                old = lst[j]
                new = self.node(old)
                if new is not old:
                    lst[j] = new
            else:
                lst.append(self.node(_MISSING))
        path.pop()
        return lst  # type: ignore[no-any-return]

    def fill_tuple(self, i: int, rec: tuple[Any, ...], cur: Any) -> tuple[Any, ...]:
        _, cls, n = rec
        items_cur: tuple[Any, ...] | None = None
        if type(cur) is cls and len(cur) == n:
            items_cur = cur
        elif _is_structural(cur) and not isinstance(cur, tuple):
            raise self.fail(f"the sender has a tuple, the receiver a {type(cur).__qualname__}")
        self.placed[i] = items_cur
        self.pending_tuples[i] = False
        changed = items_cur is None
        items: list[Any] = []
        path = self.path
        path.append((INDEX, 0))
        for j in range(n):
            path[-1] = (INDEX, j)
            old = _MISSING if items_cur is None else items_cur[j]
            new = self.node(old)
            changed = changed or new is not old
            items.append(new)
        path.pop()
        referenced = self.pending_tuples.pop(i)
        result = items_cur if items_cur is not None and not changed else _make_tuple(cls, items)
        if referenced and result is not items_cur:
            raise self.fail("a cycle runs through this tuple, which has to be rebuilt")
        self.placed[i] = result
        return result

    def fill_dataclass(self, i: int, rec: tuple[Any, ...], cur: Any) -> Any:
        _, cls, names = rec
        o = self.reuse(cur, cls, DATACLASS, "a dataclass")
        if o is None:
            self.keep.append(cur)
            o = cls.__new__(cls)
            self.claimed.add(id(o))
        self.placed[i] = o
        path = self.path
        path.append((ATTR, None))
        for name in names:
            path[-1] = (ATTR, name)
            old = getattr(o, name, _MISSING)
            new = self.node(old)
            if new is not old:
                object.__setattr__(o, name, new)
        path.pop()
        return o


def apply(refill: Refill, target: Any) -> tuple[Any, list[torch.Tensor]]:
    """The receiver's walk: refill ``target`` in place; return the (possibly new) root
    and the destination tensors, in the sender's tensor order, to receive into."""
    a = _Applier(refill)
    root = a.node(target)
    if a.pos != len(refill.nodes):
        raise MisuseError(
            f"path refill: {len(refill.nodes) - a.pos} nodes left over (corrupt Refill)"
        )
    dests = [t for t in a.dests if t is not None]
    if len(dests) != len(refill.metas):
        raise MisuseError("path refill: a tensor of the Refill was never placed (corrupt Refill)")
    return root, dests


def copy_tensors(src: list[torch.Tensor], dests: list[torch.Tensor]) -> None:
    """Copy bit patterns from ``src`` into ``dests`` (same metas), in this process."""
    for s, d in zip(src, dests, strict=True):
        _copy_bytes_into(d, as_bytes(s), TensorMeta.of(s))


def refill(sender_obj: Any, receiver_obj: Any) -> Any:
    """Path-refill ``receiver_obj`` from ``sender_obj`` in this process; return the root."""
    msg, tensors = collect(sender_obj)
    root, dests = apply(msg, receiver_obj)
    copy_tensors(tensors, dests)
    return root
