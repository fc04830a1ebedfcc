"""The arena flavor: large CPU tensors through the shared tensor arena.

``enable_shm_tensor_arena=True`` with every reader local (as vLLM's). The
serializer copies a contiguous CPU tensor once into a free arena slot and
pickles a stub (:mod:`verifiedring.arena`, ``spec/arena/TensorArena.tla``); the
message itself goes inline, as an overflow frame or as a run, as any other.
The writer half is :func:`arena_writer`; the reader half is an
:class:`~verifiedring.arena.ArenaReader` that the local reader points at each
message's sequence number before it unpickles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...arena import DEFAULT_SLOT_BYTES, DEFAULT_SLOTS, ArenaWriter


@dataclass(frozen=True)
class ArenaOptions:
    """The tensor arena's geometry: ``slots`` slots of ``slot_bytes`` bytes."""

    slots: int = DEFAULT_SLOTS
    slot_bytes: int = DEFAULT_SLOT_BYTES


class Sequenced(Protocol):
    """An end's lifecycle: its next message's sequence number is ``seq``."""

    seq: int


def arena_writer(n_reader: int, options: ArenaOptions, life: Sequenced) -> ArenaWriter:
    """The writer's arena for ``n_reader`` local readers; it reads the next sequence
    number off ``life``, the writer's lifecycle (which holds nothing of the writer)."""

    def next_seq() -> int:
        return life.seq

    return ArenaWriter(n_reader, next_seq, options.slots, options.slot_bytes)
