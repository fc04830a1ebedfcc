"""The CI's stress runs add up to a million checked messages, over every kind."""

from __future__ import annotations

from support.stress_plan import CI_TARGET, PLAN, checked


def test_the_plan_checks_a_million_messages_over_ring_queue_and_gloo() -> None:
    assert sum(checked(label) for label in PLAN) >= CI_TARGET
    assert {kind for kind, _, _ in PLAN.values()} == {"ring", "queue", "gloo"}
