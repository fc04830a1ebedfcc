"""The stateful machines' check that a reader moved only as the spec's ``Next`` allows."""

from __future__ import annotations

from verifiedring import MessageQueue
from verifiedring.queue.lifecycle import READER_TRANSITIONS
from verifiedring.testing import faults


def assert_reader_moves_in_next(reader: MessageQueue) -> None:
    """Every state move ``reader`` took (a self-move aside) is in ``READER_TRANSITIONS``."""
    moves = {(a, b) for a, b in faults.reader_transitions(reader) if a is not b}
    assert moves <= READER_TRANSITIONS, sorted(
        (a.name, b.name) for a, b in moves - READER_TRANSITIONS
    )
