"""A writer with a tensor arena and its local readers in this process, and the
distinct tensors the arena tests send."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from verifiedring import MessageQueue
from verifiedring.arena import ArenaReader, ArenaWriter
from verifiedring.testing.faults import arena_of

T = 20.0
MIB = 1 << 20


def pattern(m: int, n: int, dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """Message ``m``'s tensor: distinct for every message."""
    return (torch.arange(n, dtype=torch.int64) * 7 + m * 1_000_003).to(dtype)


class ArenaGroup:
    """A writer with an arena and ``n`` local readers, all in this process."""

    def __init__(self, n: int, **kw: Any) -> None:
        kw.setdefault("arena_slots", 2)
        kw.setdefault("arena_slot_bytes", 16 * MIB)
        self.writer = MessageQueue(n, n, max_chunk_bytes=1 * MIB, max_chunks=4,
                                   enable_shm_tensor_arena=True, **kw)
        h = self.writer.export_handle()
        self.readers = [MessageQueue.create_from_handle(h, r) for r in range(n)]
        self.writer.wait_until_ready(T)
        for r in self.readers:
            r.wait_until_ready(T)

    @property
    def arena(self) -> ArenaWriter:
        a = arena_of(self.writer)
        assert isinstance(a, ArenaWriter)
        return a

    def reader_arena(self, i: int) -> ArenaReader:
        a = arena_of(self.readers[i])
        assert isinstance(a, ArenaReader)
        return a

    def close(self) -> None:
        for q in [self.writer, *self.readers]:
            q.close()


def arena_groups() -> Iterator[Callable[..., ArenaGroup]]:
    """A fixture's body: ``make(n, **kw)`` builds an :class:`ArenaGroup`; every one made
    is closed after the test."""
    made: list[ArenaGroup] = []

    def make(n: int, **kw: Any) -> ArenaGroup:
        made.append(ArenaGroup(n, **kw))
        return made[-1]

    yield make
    for g in made:
        g.close()
