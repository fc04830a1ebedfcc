"""Reader ranks for tests that build a writer and its readers by hand."""

from __future__ import annotations

from collections.abc import Sequence


def remote_ranks(local_ranks: Sequence[int], n_remote: int) -> list[int]:
    """``n_remote`` ranks for remote readers: the highest of ``0..n_reader`` (``n_reader``
    = local + remote readers) that no local reader has, in increasing order."""
    free = [r for r in range(len(local_ranks) + n_remote + 1) if r not in local_ranks]
    return free[len(free) - n_remote :]
