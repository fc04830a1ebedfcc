"""Points the whole enumeration (``make interrupts``) found that the suite's fixed
sample does not reach, each tried in a fresh process (in a ``second`` scenario, with
each point of the cut end's next call): the oracle of ``tests/interrupts`` must accept
every one. Each case failed before its fix."""

from __future__ import annotations

import pytest
from interrupts.points import Point
from interrupts.run import enumerate_scenario, violations_at

CASES = [
    # a streamed run with a remote reader, cut right after its LAST's publish store:
    # the writer reused its sequence number (the remote frame never went)
    ("stream_remote", "cursors.py entry WriterCursor.wake_sleepers #3"),
    ("stream_remote", "queue/flavors/run/writer.py return monotonic #3"),
    # the next call's due ABORT out, its sequence number's count cut (at the entry of
    # WriterLifecycle.finish): the number was reused
    ("second", "cursors.py entry WriterCursor.wake_sleepers"),
    # the next dequeue's skip of the cut run done, its report cut (at the entry of
    # Lifecycle.enter): the message was neither delivered nor reported
    ("second", "queue/local_path.py entry RunReceiver.take"),
]


@pytest.mark.parametrize(("scenario", "first"), CASES)
def test_no_point_breaks_the_promise(scenario: str, first: str) -> None:
    result = violations_at(scenario, first)
    assert result.tried == result.points and result.tried > 0
    assert result.violations == {}


def _in_acquire_read(points: list[Point]) -> list[Point]:
    return [p for p in points if p[0][0] == "queue/local_reader.py"]


def test_no_point_in_acquire_read_leaves_its_chunk_held() -> None:
    """Every point of a local reader's ``acquire_read`` frame (its file's points in
    the in-place scenario). Before the fix, a composed acquire_read made two calls
    around the lent chunk (a context manager's exit after the take, the give-back in
    its finally): an interrupt at either's entry left the chunk lent, and the next
    acquire_read raised MisuseError ("already holds chunk"): 3 of its points."""
    result = enumerate_scenario("in_place", _in_acquire_read, 2)
    assert result.tried >= 3
    assert result.violations == {}
