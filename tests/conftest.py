"""Shared fixtures: fail any test that leaves a ring segment in /dev/shm. And the
tiers' markers, by path (``make check`` deselects them; ``make test`` and CI run all):

* ``faults``: everything under tests/faults/ (private namespaces, dead peers, ...);
* ``tlc``: the modules that start TLC (trace validation);
* ``slow``: the tests that take seconds alone (SLOW below, from ``--durations``).

Each pytest process (each xdist worker) records the names of the segments it
creates through :meth:`SharedSegment.create`; after every test, the ones
still present in /dev/shm are leaks. Only names this process created (or a
test registered with ``shm_segments.track``, e.g. one made by a child
process) are checked, so parallel workers never see each other's segments.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from support.fakes import segment_exists
from support.groups import Group

from verifiedring import shm
from verifiedring.shm import RING_SEGMENT, SHM_DIR, SharedSegment

#: modules (paths under tests/) that start the TLC model checker
TLC_MODULES = frozenset({"test_trace_validation.py", "test_queue_trace.py"})
#: modules, or test node ids (path::name, parameters left off), taking seconds alone
SLOW = frozenset({
    "test_ring_stateful.py",  # the ring machine: ~23 s
    "test_queue_stateful.py",  # the queue and run machines, and their coverage floors
    "test_dist_gloo.py",  # gloo worlds of processes
    "test_bench_idle.py::test_quick_run_of_verifiedring_alone_writes_the_documented_json",
    "test_bench_cadence.py",  # a short run: 8 runs of processes
    "test_tensor_arena.py::test_arena_machine",
    "test_tensor_arena.py::test_three_reader_processes_get_exact_bytes_through_the_arena",
    "test_dist_paths.py::test_random_structures_round_trip_by_walk_and_plan",
    # a 5 s teardown each
    "test_queue_failures.py::test_read_only_buffers_are_copied_before_enqueue_returns",
    "test_queue_failures.py::test_a_message_that_does_not_unpickle_is_consumed_on_every_path",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        path = os.path.relpath(str(item.path), here).replace(os.sep, "/")
        if path.startswith("faults/"):
            item.add_marker(pytest.mark.faults)
        if path in TLC_MODULES:
            item.add_marker(pytest.mark.tlc)
        if path in SLOW or f"{path}::{item.name.partition('[')[0]}" in SLOW:
            item.add_marker(pytest.mark.slow)


_created: list[str] = []
_original_create = SharedSegment.create.__func__  # type: ignore[attr-defined]


def _recording_create(
    cls: type[SharedSegment], size: int, name: str | None = None,
    commit: Sequence[tuple[int, int]] | None = None, what: str = RING_SEGMENT,
    room: int | None = None,
) -> SharedSegment:
    segment: SharedSegment = _original_create(cls, size, name, commit, what, room)
    _created.append(segment.name)
    return segment


SharedSegment.create = classmethod(_recording_create)  # type: ignore[method-assign,assignment]


class SegmentTracker:
    """The segments one test created (in this process) or registered."""

    def __init__(self) -> None:
        _created.clear()
        self._extra: list[str] = []

    def track(self, name: str) -> None:
        """Also check ``name`` (a segment created outside this process)."""
        self._extra.append(name)

    @property
    def names(self) -> list[str]:
        return [*_created, *self._extra]

    def leaked(self) -> list[str]:
        return [n for n in dict.fromkeys(self.names) if segment_exists(n)]


@pytest.fixture(autouse=True)
def shm_segments() -> Iterator[SegmentTracker]:
    tracker = SegmentTracker()
    yield tracker
    leaked = tracker.leaked()
    for name in leaked:  # clean up so one leak does not cascade
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(SHM_DIR, name))
    if leaked:
        pytest.fail(
            f"test left shared-memory segments behind in {SHM_DIR}: {leaked} "
            f"(prefix {shm.NAME_PREFIX!r}); close every ShmRingBuffer it creates",
            pytrace=False,
        )


@pytest.fixture
def group() -> Iterator[Callable[..., Group]]:
    """``group(n_local, n_remote, **kw)``: a handshaken :class:`Group`, closed after."""
    made: list[Group] = []

    def make(n_local: int = 1, n_remote: int = 0, **kw: Any) -> Group:
        g = Group(n_local, n_remote, **kw)
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()
