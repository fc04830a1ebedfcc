"""Sample payloads and exact comparisons for code built on :mod:`verifiedring.distributed`.

Shared by the tests, stress runs and benches. Every builder is deterministic
in its ``seed``, so a receiver builds the sender's expected value itself and
compares bit for bit. torch (and the distributed layer) load on first use.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# The dtypes mixed_tensor_dict cycles through, by torch attribute name.
MIXED_DTYPES = (
    "float32",
    "float16",
    "bfloat16",
    "int64",
    "int32",
    "int8",
    "uint8",
    "bool",
    "float64",
    "complex64",
)


def _random(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Random bit patterns of ``dtype`` (NaN payloads and all), on the CPU."""
    import torch

    nbytes = dtype.itemsize
    n = 1
    for s in shape:
        n *= s
    raw = torch.randint(0, 256, (n * nbytes,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def mixed_tensor_dict(
    seed: int, n: int = 50, device: str = "cpu", max_numel: int = 64
) -> dict[str, Any]:
    """``n`` small tensors of mixed dtypes and shapes plus a few non-tensor values."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {"step": seed, "note": f"dict {seed}", "none": None}
    for i in range(n):
        dtype = getattr(torch, MIXED_DTYPES[i % len(MIXED_DTYPES)])
        numel = int(torch.randint(1, max_numel, (1,), generator=g))
        shape = (numel,) if i % 3 else (1, numel)
        out[f"t{i}"] = _random(shape, dtype, g).to(device)
    return out


def special_tensors(seed: int, device: str = "cpu") -> dict[Any, Any]:
    """Empty, non-contiguous, 0-d, bool, bfloat16, NaN-payload and large tensors."""
    import torch

    g = torch.Generator().manual_seed(seed)
    nan_bits = torch.tensor([0x7FC00001, 0x7F800123, -0x0000FFFF - 1], dtype=torch.int32)
    out: dict[Any, Any] = {
        "empty": torch.empty(0, 3, device=device),
        "empty_bool": torch.empty(0, dtype=torch.bool, device=device),
        "noncontig": _random((5, 4), torch.float32, g).to(device).t(),
        "strided": _random((16,), torch.int64, g).to(device)[::3],
        "zero_d": torch.tensor(7, dtype=torch.int64, device=device),
        "zero_d_bf16": torch.tensor(1.5, dtype=torch.bfloat16, device=device),
        "bool": _random((9,), torch.bool, g).to(device),
        "bf16": _random((3, 5), torch.bfloat16, g).to(device),
        "nan_payloads": nan_bits.view(torch.float32).to(device),
        "large": _random((300_000,), torch.float32, g).to(device),
        7: "int key",
    }
    return out


@dataclass
class Inner:
    """A dataclass leaf holder for nested samples."""

    ids: list[int]
    scale: float | None
    table: dict[Any, Any] = field(default_factory=dict)
    weight: torch.Tensor | None = None


@dataclass
class Meta:
    """Nested metadata: int/dotted/tuple keys, defaultdicts, empties, None, shared refs, cycles."""

    by_int: dict[int, Any]
    dotted: dict[Any, Any]
    counts: defaultdict[str, list[int]]
    inners: list[Inner]
    pair: tuple[Any, ...]
    empty: dict[str, Any]
    nothing: Any = None
    loop: list[Any] = field(default_factory=list)


def nested_metadata(seed: int, device: str = "cpu") -> Meta:
    """A Meta whose leaves and tensors depend on ``seed`` (structure fixed)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    shared = Inner(
        [seed, seed + 1], 0.5 * seed, {"k": seed}, _random((4,), torch.float32, g).to(device)
    )
    counts: defaultdict[str, list[int]] = defaultdict(list)
    counts["a"].append(seed)
    m = Meta(
        by_int={128: seed, 3: _random((2, 3), torch.bfloat16, g).to(device), -1: None},
        dotted={"a.b": seed * 2, "a.b.c": {"x.y": [seed]}, (1, "t"): "tuple key"},
        counts=counts,
        inners=[shared, shared, Inner([], None)],
        pair=(_random((3,), torch.int32, g).to(device), seed, "s"),
        empty={},
        nothing=None,
    )
    m.loop = [m.inners, seed]
    m.loop.append(m.loop)  # a cycle
    return m


def blank_like(obj: Any) -> Any:
    """A receiver-side object of ``obj``'s structure: tensors zeroed, leaves scrambled."""
    import torch

    from ..distributed.paths import DATACLASS, DICT, LIST, TUPLE, _kind

    memo: dict[int, Any] = {}

    def go(x: Any) -> Any:
        if id(x) in memo:
            return memo[id(x)]
        if isinstance(x, torch.Tensor):
            memo[id(x)] = out = torch.zeros_like(x)
            return out
        kind = _kind(x)
        if kind == DICT:
            d = type(x)(x.default_factory) if isinstance(x, defaultdict) else type(x)()
            memo[id(x)] = d
            for k, v in x.items():
                d[k] = go(v)
            return d
        if kind == LIST:
            lst = type(x)()
            memo[id(x)] = lst
            lst.extend(go(v) for v in x)
            return lst
        if kind == TUPLE:
            items = [go(v) for v in x]
            return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
        if kind == DATACLASS:
            o = object.__new__(type(x))
            memo[id(x)] = o
            for f in dataclasses.fields(x):
                object.__setattr__(o, f.name, go(getattr(x, f.name)))
            return o
        return "scrambled" if x is not None else 0

    return go(obj)


def assert_bits_equal(a: torch.Tensor, b: torch.Tensor, what: str = "tensor") -> None:
    """Same dtype, shape and bit pattern (NaN payloads included); device may differ."""
    import torch

    from ..distributed.transfer import as_bytes

    if a.dtype != b.dtype or a.shape != b.shape:
        raise AssertionError(
            f"{what}: {b.dtype}{tuple(b.shape)} != expected {a.dtype}{tuple(a.shape)}"
        )
    if not torch.equal(as_bytes(a).cpu(), as_bytes(b).cpu()):
        raise AssertionError(f"{what}: bit patterns differ")


class _Mirror:
    """One :func:`assert_mirrors` comparison: the containers and tensors matched so far
    (both ways, the objects kept alive so their ids stay theirs)."""

    def __init__(self) -> None:
        import torch

        from ..distributed import paths

        self.torch = torch
        self.paths = paths
        self.pairs: dict[int, int] = {}
        self.back: dict[int, int] = {}
        self.keep: list[Any] = []

    def go(self, e: Any, g: Any, path: list[Any]) -> None:
        paths = self.paths
        where = paths.format_path(path)
        if type(e) is not type(g):
            raise AssertionError(f"{where}: type {type(g).__name__} != {type(e).__name__}")
        if isinstance(e, self.torch.Tensor):
            if self.matched(e, g, where):
                assert_bits_equal(e, g, where)
            return
        kind = paths._kind(e)
        if kind == paths.LEAF:
            if e != g:
                raise AssertionError(f"{where}: {g!r} != {e!r}")
        elif self.matched(e, g, where):
            if kind == paths.DICT:
                self.dicts(e, g, path, where)
            elif kind in (paths.LIST, paths.TUPLE):
                self.sequences(e, g, path, where)
            elif kind == paths.DATACLASS:
                self.dataclass_fields(e, g, path)

    def matched(self, e: Any, g: Any, where: str) -> bool:
        """Pair ``e`` with ``g``; false if they were paired before (nothing left to
        compare), an error if either was paired with another object."""
        if id(e) in self.pairs or id(g) in self.back:
            if self.pairs.get(id(e)) != id(g) or self.back.get(id(g)) != id(e):
                raise AssertionError(f"{where}: aliasing differs from the sender's")
            return False
        self.pairs[id(e)], self.back[id(g)] = id(g), id(e)
        self.keep.extend((e, g))
        return True

    def dicts(self, e: Any, g: Any, path: list[Any], where: str) -> None:
        if list(e) != list(g) or [type(k) for k in e] != [type(k) for k in g]:
            raise AssertionError(f"{where}: keys {list(g)!r} != {list(e)!r}")
        if isinstance(e, defaultdict) and e.default_factory is not g.default_factory:
            raise AssertionError(f"{where}: default_factory differs")
        for k in e:
            self.go(e[k], g[k], [*path, (self.paths.KEY, k)])

    def sequences(self, e: Any, g: Any, path: list[Any], where: str) -> None:
        if len(e) != len(g):
            raise AssertionError(f"{where}: length {len(g)} != {len(e)}")
        for i, (ei, gi) in enumerate(zip(e, g, strict=True)):
            self.go(ei, gi, [*path, (self.paths.INDEX, i)])

    def dataclass_fields(self, e: Any, g: Any, path: list[Any]) -> None:
        for f in dataclasses.fields(e):
            self.go(getattr(e, f.name), getattr(g, f.name), [*path, (self.paths.ATTR, f.name)])


def assert_mirrors(expected: Any, got: Any) -> None:
    """``got`` equals ``expected`` exactly: types (keys too), order, tensor bits,
    and aliasing -- a one-to-one match of shared containers and tensors."""
    _Mirror().go(expected, got, [])
