"""Path refill without a process group: collect on one object, apply to another.

Hypothesis builds random nested structures (dataclasses, dicts with int, str,
dotted and tuple keys, defaultdicts, lists, tuples, None, empty dicts, tensors,
shared references) and checks they round-trip exactly, by walk and by plan.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from verifiedring.distributed.paths import (  # noqa: E402
    apply,
    collect,
    copy_tensors,
    format_path,
    refill,
)
from verifiedring.distributed.plan import PlanCache, RefillPlan  # noqa: E402
from verifiedring.distributed.transfer import TensorMeta  # noqa: E402
from verifiedring.errors import MisuseError  # noqa: E402
from verifiedring.testing.samples import (  # noqa: E402
    assert_mirrors,
    blank_like,
    nested_metadata,
)


@dataclass
class Node:
    a: Any = None
    b: Any = None


@dataclass(frozen=True)
class Frozen:
    x: Any
    t: Any


def plan_round_trip(sender: Any, receiver: Any) -> Any:
    plan = RefillPlan(sender)
    leaves, tensors = plan.collect(sender)
    root, dests = plan.apply(receiver, leaves, [TensorMeta.of(t) for t in tensors])
    copy_tensors(tensors, dests)
    return root


# --- fixed cases -------------------------------------------------------------------


def test_typed_keys_int_dot_tuple() -> None:
    sender = {128: 1, "128": 2, "a.b": {"c.d": 3}, (1, "x"): 4, None: 5}
    receiver: dict[Any, int] = {"128": 0}
    got = refill(sender, receiver)
    assert got is receiver
    assert_mirrors(sender, got)
    assert 128 in got and got[128] == 1 and got["128"] == 2


def test_empty_dicts_none_and_defaultdict_survive() -> None:
    dd: defaultdict[str, list[int]] = defaultdict(list, {"k": [1]})
    sender = Node(a={}, b=[None, dd, {}])
    receiver = Node(a={"stale": 1}, b=[1, {}, None])
    got = refill(sender, receiver)
    assert_mirrors(sender, got)
    assert isinstance(got.b[1], defaultdict) and got.b[1].default_factory is list


def test_shared_references_and_cycles_keep_aliasing() -> None:
    shared = {"x": torch.arange(3)}
    t = torch.ones(2)
    sender = Node(a=[shared, shared, t, t], b=None)
    sender.b = sender  # cycle through a dataclass
    receiver = Node(a=[{"x": torch.zeros(3)}, {"x": torch.zeros(3)}, None, None], b=None)
    got = refill(sender, receiver)
    assert_mirrors(sender, got)
    assert got.a[0] is got.a[1] and got.a[2] is got.a[3] and got.b is got


def test_receiver_aliasing_split_where_sender_has_distinct_objects() -> None:
    sender = Node(a={"v": 1}, b={"v": 2})
    same = {"v": 0}
    got = refill(sender, Node(a=same, b=same))
    assert_mirrors(sender, got)
    assert got.a is not got.b and got.a["v"] == 1 and got.b["v"] == 2


def test_tensors_in_place_or_reallocated() -> None:
    keep = torch.zeros(2, 3)
    swap = torch.zeros(4)
    sender = {
        "keep": torch.ones(2, 3),
        "swap": torch.ones(5, dtype=torch.int8),
        "new": torch.ones(1),
    }
    got = refill(sender, {"keep": keep, "swap": swap})
    assert got["keep"] is keep and bool((keep == 1).all())
    assert got["swap"] is not swap and got["swap"].dtype == torch.int8
    assert_mirrors(sender, got)


def test_tuples_are_replaced_in_their_parent() -> None:
    inner = [1]
    sender = Node(a=(torch.ones(2), inner, 3), b=(1, 2))
    old = (torch.zeros(2), [0], 0)
    receiver = Node(a=old, b=(0, 0))
    got = refill(sender, receiver)
    assert_mirrors(sender, got)
    assert got.a is not old and got.a[0] is old[0]  # tensor filled in place, tuple rebuilt
    root = refill((torch.ones(1), {"k": 1}), (torch.zeros(1), {}))
    assert isinstance(root, tuple) and root[1] == {"k": 1}


def test_frozen_dataclass_and_namedtuple() -> None:
    from collections import namedtuple

    Pair = namedtuple("Pair", "x y")
    sender = Frozen(x=Pair(torch.ones(1), {"a": 1}), t={"z": 2})
    got = refill(sender, Frozen(x=Pair(torch.zeros(1), {}), t={}))
    assert_mirrors(sender, got)
    got2 = plan_round_trip(sender, blank_like(sender))
    assert_mirrors(sender, got2)


@pytest.mark.parametrize(
    ("receiver", "where"),
    [
        (Node(a=[1], b=None), "obj.a"),
        (Node(a={"k": [1]}, b=None), "obj.a['k']"),
        ({"x": Node()}, "obj"),
        (Node(a={"k": {"deep": {}}}, b=None), "obj.a['k']['deep']"),
    ],
)
def test_structure_mismatch_names_the_path(receiver: Any, where: str) -> None:
    sender = Node(a={"k": {"deep": torch.ones(1)}}, b=None)
    with pytest.raises(MisuseError) as e:
        refill(sender, receiver)
    assert f"at {where}:" in str(e.value)


def test_cycle_through_a_rebuilt_tuple_is_refused() -> None:
    lst: list[Any] = []
    tup = (torch.ones(1), lst)
    lst.append(tup)
    msg, _ = collect(tup)
    with pytest.raises(MisuseError, match="cycle runs through this tuple"):
        apply(msg, None)


def test_format_path() -> None:
    path = [(0, "meta"), (1, 128), (1, "a.b"), (1, (1, 2)), (2, 3)]
    assert format_path(path) == "obj.meta[128]['a.b'][(1, 2)][3]"


def test_plan_round_trip_and_changed_structure_names_the_path() -> None:
    sender = nested_metadata(5)
    got = plan_round_trip(sender, refill(nested_metadata(1), blank_like(sender)))
    assert_mirrors(sender, got)
    plan = RefillPlan(sender)
    broken = nested_metadata(5)
    del broken.dotted["a.b.c"]
    with pytest.raises(MisuseError, match=r"obj\.dotted\['a\.b\.c'\] is missing"):
        plan.collect(broken)
    assert PlanCache().plan is None


# --- property tests ----------------------------------------------------------------

keys = st.one_of(
    st.integers(-3, 300),
    st.text("ab.", max_size=4),
    st.tuples(st.integers(0, 3), st.text("xy", max_size=2)),
)
scalars = st.one_of(
    st.none(), st.integers(), st.text(max_size=5), st.booleans(),
    st.floats(allow_nan=False), st.tuples(st.integers(), st.none()),
)
dtypes = st.sampled_from([torch.float32, torch.bfloat16, torch.bool, torch.int64, torch.uint8])


@st.composite
def tensors(draw: st.DrawFn) -> Any:
    shape = draw(st.lists(st.integers(0, 3), max_size=3))
    dtype = draw(dtypes)
    n = 1
    for s in shape:
        n *= s
    raw = torch.tensor(draw(st.lists(st.integers(0, 255), min_size=n * dtype.itemsize,
                                     max_size=n * dtype.itemsize)), dtype=torch.uint8)
    if dtype == torch.bool:
        raw = raw % 2
    t = raw.view(dtype).reshape(shape)
    return t.t() if t.dim() == 2 and draw(st.booleans()) else t


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.dictionaries(keys, children, max_size=4),
        st.dictionaries(keys, children, max_size=3).map(lambda d: defaultdict(list, d)),
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.builds(Node, children, children),
    )


trees = st.recursive(st.one_of(scalars, tensors()), containers, max_leaves=25)


@st.composite
def with_sharing(draw: st.DrawFn) -> Any:
    """A tree where some containers/tensors are reached twice (and maybe a cycle)."""
    shared = draw(st.one_of(tensors(), st.dictionaries(keys, trees, max_size=2)))
    root = Node(a=[shared, draw(trees), shared], b=draw(trees))
    if draw(st.booleans()):
        root.a.append(root)  # cycle
    return root


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(trees, with_sharing()))
def test_random_structures_round_trip_by_walk_and_plan(sender: Any) -> None:
    assert_mirrors(sender, refill(sender, blank_like(sender)))
    assert_mirrors(sender, plan_round_trip(sender, blank_like(sender)))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, trees)
def test_any_receiver_either_mirrors_or_names_the_path(sender: Any, receiver: Any) -> None:
    try:
        got = refill(sender, receiver)
    except MisuseError as e:
        assert "path refill at obj" in str(e)
    else:
        assert_mirrors(sender, got)
