"""The stateful machines' check that an end moved only as the spec's ``Next`` allows."""

from __future__ import annotations

from verifiedring import MessageQueue
from verifiedring.queue.lifecycle import WRITER_TRANSITIONS
from verifiedring.testing import faults


def assert_writer_moves_in_next(writer: MessageQueue) -> None:
    """Every state move ``writer`` took (a self-move aside) is in ``WRITER_TRANSITIONS``."""
    moves = {(a, b) for a, b in faults.writer_transitions(writer) if a is not b}
    assert moves <= WRITER_TRANSITIONS, sorted(
        (a.name, b.name) for a, b in moves - WRITER_TRANSITIONS
    )
