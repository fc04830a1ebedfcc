"""What the stress tests of one CI run move: each test checks exactly its planned count."""

from __future__ import annotations

#: The checked messages (received and verified, summed over readers) of one CI run, at least.
CI_TARGET = 1_000_000
#: test -> (kind, readers, messages each reader checks).
PLAN: dict[str, tuple[str, int, int]] = {
    "ring wrapping, 1 reader": ("ring", 1, 10_000),
    "ring wrapping, 2 readers": ("ring", 2, 10_000),
    "ring wrapping, 3 readers": ("ring", 3, 10_000),
    "ring one chunk": ("ring", 2, 5_000),
    "ring bulk": ("ring", 3, 320_000),
    "queue 1 local + 1 remote": ("queue", 2, 5_000),
    "queue 3 local + 1 remote, tight window": ("queue", 4, 5_000),
    "queue streamed runs, 3 local, objects > ring": ("queue", 3, 20_000),
    "queue streamed runs, 2 local + 1 remote": ("queue", 3, 10_000),
    "gloo 2 ranks": ("gloo", 1, 200),
}


def checked(label: str) -> int:
    """The checked messages planned for ``label``."""
    _, readers, each = PLAN[label]
    return readers * each
