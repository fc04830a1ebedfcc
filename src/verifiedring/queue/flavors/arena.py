"""The arena flavor: large CPU tensors through the shared tensor arena.

``enable_shm_tensor_arena=True`` with every reader local (as vLLM's). The
serializer copies a contiguous CPU tensor once into a free arena slot and
pickles a stub (:mod:`verifiedring.arena`, ``spec/TensorArena.tla``); the
message itself goes inline, as an overflow frame or as a run, as any other.
The writer half is :func:`arena_writer`; the reader half is an
:class:`~verifiedring.arena.ArenaReader` that the local reader points at each
message's sequence number before it unpickles.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ...arena import DEFAULT_SLOT_BYTES, DEFAULT_SLOTS, ArenaWriter


@dataclass(frozen=True)
class ArenaOptions:
    """The tensor arena's geometry: ``slots`` slots of ``slot_bytes`` bytes."""

    slots: int = DEFAULT_SLOTS
    slot_bytes: int = DEFAULT_SLOT_BYTES


class Sequenced(Protocol):
    """An end whose next message's sequence number is ``_seq``."""

    _seq: int


def arena_writer(n_reader: int, options: ArenaOptions, writer: Sequenced) -> ArenaWriter:
    """The writer's arena for ``n_reader`` local readers; it reads ``writer``'s next
    sequence number through a weak reference (no cycle: ``mq = None`` frees it)."""
    return ArenaWriter(n_reader, _next_seq_of(writer), options.slots, options.slot_bytes)


def _next_seq_of(writer: Sequenced) -> Callable[[], int]:
    ref = weakref.ref(writer)

    def next_seq() -> int:
        w = ref()
        return -1 if w is None else w._seq

    return next_seq
