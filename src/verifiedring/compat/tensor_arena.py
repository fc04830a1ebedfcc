"""vLLM's ``ShmTensorArena`` surface, a thin adapter over :mod:`verifiedring.arena`.

vLLM's names, with verifiedring's arena underneath (its layout, its per-slot
``seq``/``gen`` claim and its owes bytes, ``spec/arena/TensorArena.tla``):

* ``ShmTensorArena(n_reader, slot_bytes, n_slots)`` makes a writer arena (a new
  segment; each ``write_tensor`` is its own published message);
  ``ShmTensorArena(*writer.handle(), reader_rank=i)`` attaches reader ``i``.
  A queue's own arenas are reached as ``mq.tensor_arena`` (:func:`facade_of`:
  one adapter per arena, made once, never closing the queue's arena).
* ``write_tensor(t)``: the slot index, or ``None`` (larger than a slot, no byte
  view, or no slot that every reader released); never waits.
* ``get_tensor(idx, nbytes, dtype, shape)``: a zero-copy, writable view of the
  slot. The slot stays owed until the view's storage is freed, across any number of
  ``flush_releases()`` (vLLM 0.34's contract). ``_pending_release`` lists the slots
  freed since the last flush (released already: the writer may reuse them).
* ``_TENSOR_ARENAS``: reader arenas by segment name (weak values, as vLLM's);
  every queue reader's arena is entered as it attaches once :func:`register`
  is the arena's attach hook (``install()`` sets it).
* Never pinned: ``_ensure_pinned()`` leaves ``_pinned`` False and
  ``_deferred_releases`` stays empty (the views are pageable memory).
"""

from __future__ import annotations

import contextlib
import pickle
import sys
import weakref
from typing import Any

from ..arena import ARENA_MIN_BYTES as _ARENA_MIN_BYTES
from ..arena import ARENA_MIN_BYTES as _ARENA_MIN_BYTES_DEFAULT
from ..arena import DEFAULT_SLOT_BYTES, DEFAULT_SLOTS, ArenaHandle, ArenaReader, ArenaWriter
from ..arena import qualifies as _qualifies
from ..shm import SharedSegment

__all__ = ["_ARENA_MIN_BYTES", "_TENSOR_ARENAS", "ShmTensorArena", "_ArenaPickler",
           "drop_facade", "facade_of", "register"]

#: The one facade over each queue arena, kept while the arena lives (the arena is a weak
#: key and the facade holds it weakly too: the pair goes when the queue's arena does).
_FACADES: weakref.WeakKeyDictionary[ArenaWriter | ArenaReader, ShmTensorArena] = (
    weakref.WeakKeyDictionary()
)
#: Queue arenas whose facade was dropped (``mq.tensor_arena = None``).
_DROPPED: weakref.WeakSet[ArenaWriter | ArenaReader] = weakref.WeakSet()
#: Reader arenas by segment name, for the ``_ArenaPickler`` stubs' rebuild.
_TENSOR_ARENAS: weakref.WeakValueDictionary[str, ShmTensorArena] = (
    weakref.WeakValueDictionary()
)


class ShmTensorArena:
    """vLLM's arena object over an :class:`ArenaWriter` (``reader_rank`` -1) or an
    :class:`ArenaReader`."""

    def __init__(
        self, n_reader: int, slot_bytes: int = DEFAULT_SLOT_BYTES, n_slots: int = DEFAULT_SLOTS,
        name: str | None = None, reader_rank: int = -1, *, _over: Any = None,
    ) -> None:
        self._owned = _over is None  # closed with this object (not a queue's arena)
        self._seq = 0  # a stand-alone writer's next message: one per write_tensor
        if _over is None and name is None:
            _over = ArenaWriter(n_reader, _next_seq_of(self), n_slots, slot_bytes)
        elif _over is None and name is not None:
            if not 0 <= reader_rank < n_reader:
                raise ValueError(f"ShmTensorArena {name!r}: reader_rank {reader_rank} is not "
                                 f"one of the {n_reader} readers")
            _over = ArenaReader(ArenaHandle(name, n_reader, n_slots, slot_bytes), reader_rank,
                                announce=False)
        arena: ArenaWriter | ArenaReader = _over
        # owned: held here; a queue's: weakly (the arena holds its facade, no cycle)
        self._ref: Any = (lambda: arena) if self._owned else weakref.ref(arena)
        h = _over.handle
        self.n_reader, self.slot_bytes, self.n_slots = h.n_reader, h.slot_bytes, h.n_slots
        self.reader_rank = _over.index if isinstance(_over, ArenaReader) else -1
        self.is_creator = isinstance(_over, ArenaWriter)
        self._pinned = False
        self._pin_attempted = False
        self._deferred_releases: list[tuple[Any, list[int]]] = []
        if not self._owned:
            _FACADES[_over] = self

    @property
    def _arena(self) -> ArenaWriter | ArenaReader:
        arena: ArenaWriter | ArenaReader | None = self._ref()
        if arena is None:
            raise ValueError(f"ShmTensorArena (reader_rank {self.reader_rank}): the queue "
                             "whose arena this was is gone")
        return arena

    @property
    def shared_memory(self) -> SharedSegment:
        """The mapped segment (``.name``, ``.buf``, ``.size``)."""
        return self._arena.segment

    @property
    def total_bytes(self) -> int:
        """The segment's size in bytes."""
        return self._arena.layout.total_bytes

    def handle(self) -> tuple[int, int, int, str]:
        """``(n_reader, slot_bytes, n_slots, name)``: a reader's constructor arguments."""
        return self.n_reader, self.slot_bytes, self.n_slots, self._arena.handle.name

    def _slot(self, idx: int, nbytes: int) -> memoryview:
        """Slot ``idx``'s first ``nbytes`` bytes."""
        off = self._arena.offset(idx)
        return self._arena.segment.buf[off : off + nbytes]

    def _meta(self, idx: int) -> memoryview:
        """A snapshot of slot ``idx``'s state in vLLM's layout: ``written`` (1 once
        claimed), then per reader ``done`` (1: released). Writing it changes nothing."""
        with self._arena.owes(idx) as owes:
            done = bytes(1 - b for b in owes)
        return memoryview(bytearray([int(self._arena.seq_gen(idx)[1] > 0)]) + done)

    def write_tensor(self, t: Any) -> int | None:
        """Copy ``t``'s bytes into a free slot: its index, or ``None`` (fall back)."""
        arena = self._arena
        if not isinstance(arena, ArenaWriter):
            raise ValueError(f"ShmTensorArena {arena.handle.name!r}: reader {self.reader_rank} "
                             "cannot write_tensor (only the writer arena can)")
        if self._owned:
            arena.begin()
        claimed = arena.claim(t)
        if claimed is not None and self._owned:
            self._seq += 1  # published at once
        return None if claimed is None else claimed[0]

    def _reader(self) -> ArenaReader:
        arena = self._arena
        if not isinstance(arena, ArenaReader):
            raise ValueError(f"ShmTensorArena {arena.handle.name!r} is the writer's: "
                             "only a reader arena (reader_rank >= 0) has views")
        return arena

    def get_tensor(self, idx: int, nbytes: int, dtype: Any, shape: tuple[int, ...]) -> Any:
        """A zero-copy view of slot ``idx`` as ``dtype`` / ``shape``."""
        return self._get(idx, None, nbytes, str(dtype).removeprefix("torch."), shape)

    def _get(self, idx: int, gen: int | None, nbytes: int, dtype: str,
             shape: tuple[int, ...]) -> Any:
        reader = self._reader()
        if gen is None:
            gen = reader.seq_gen(idx)[1]
        return reader.rebuild(idx, gen, reader.offset(idx), nbytes, dtype, tuple(shape))

    @property
    def _pending_release(self) -> list[int]:
        """The slots whose last view's storage was freed since the last flush, in that
        order (vLLM 0.34's: queued for release; here already released)."""
        arena = self._arena
        return list(arena.freed) if isinstance(arena, ArenaReader) else []

    def flush_releases(self) -> None:
        """vLLM 0.34's flush: forget the freed slots (:attr:`_pending_release`). A slot a
        view still holds stays owed, however many flushes pass: it is released when the
        view's storage is freed."""
        self._reader().forget_freed()

    def _ensure_pinned(self) -> None:
        """vLLM pins the mapping for faster host-to-device copies; verifiedring
        never does (``_pinned`` stays False)."""
        self._pin_attempted = True

    def __del__(self) -> None:
        if not getattr(self, "_owned", False) or not hasattr(self, "_ref"):
            return  # a queue's arena, or __init__ raised
        arena = self._arena
        if isinstance(arena, ArenaWriter):
            arena.unlink()
        with contextlib.suppress(BufferError):  # a view of _slot still alive
            arena.close()


def _next_seq_of(owner: ShmTensorArena) -> Any:
    """``owner``'s next message number, through a weak reference (no cycle)."""
    ref = weakref.ref(owner)

    def next_seq() -> int:
        o = ref()
        return -1 if o is None else o._seq

    return next_seq


def facade_of(arena: ArenaWriter | ArenaReader | None) -> ShmTensorArena | None:
    """The one :class:`ShmTensorArena` over a queue's ``arena`` (made on first use;
    a reader's is entered in ``_TENSOR_ARENAS``); ``None`` once dropped."""
    if arena is None or arena in _DROPPED:
        return None
    made = _FACADES.get(arena)
    if made is None:
        made = ShmTensorArena(arena.handle.n_reader, _over=arena)
        if isinstance(arena, ArenaReader):
            _TENSOR_ARENAS[arena.handle.name] = made
    return made


def drop_facade(arena: ArenaWriter | ArenaReader) -> None:
    """Let ``arena``'s :class:`ShmTensorArena` go, for good (:func:`facade_of` gives
    ``None`` from then on)."""
    _DROPPED.add(arena)
    _FACADES.pop(arena, None)


def register(reader: ArenaReader) -> None:
    """The arena's attach hook: a queue reader's arena enters ``_TENSOR_ARENAS``."""
    facade_of(reader)


def _rebuild_arena_tensor(name: str, idx: int, gen: int, nbytes: int, dtype: str,
                          shape: tuple[int, ...], parameter: bool) -> Any:
    """Unpickling hook of :class:`_ArenaPickler`'s stubs: the view, from the reader
    arena registered under ``name``."""
    arena = _TENSOR_ARENAS.get(name)
    if arena is None:
        raise ValueError(f"tensor arena {name!r} has no reader arena in _TENSOR_ARENAS "
                         "in this process")
    t = arena._get(idx, gen, nbytes, dtype, shape)
    if parameter:
        import torch

        return torch.nn.Parameter(t, requires_grad=False)
    return t


def _min_bytes() -> int:
    """The divert threshold, read at each tensor: this module's ``_ARENA_MIN_BYTES``
    (vLLM 0.34 patches it here) where it was changed, else ``verifiedring.compat.vllm``'s
    (where vLLM 0.33 reads it)."""
    from . import vllm

    own: int = sys.modules[__name__]._ARENA_MIN_BYTES
    return own if own != _ARENA_MIN_BYTES_DEFAULT else int(vllm._ARENA_MIN_BYTES)


class _ArenaPickler(pickle.Pickler):
    """A Pickler (protocol 5) that diverts a contiguous CPU ``Tensor`` or ``Parameter``
    of at least ``_ARENA_MIN_BYTES`` (:func:`_min_bytes`, read at each tensor) into
    ``arena``; all else, and a tensor with no free slot, goes on to the dispatch table."""

    def __init__(self, file: Any, arena: ShmTensorArena, buffer_callback: Any = None) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL, buffer_callback=buffer_callback)
        self.arena = arena

    def reducer_override(self, obj: Any) -> Any:
        import torch

        kind = type(obj)
        if kind is not torch.Tensor and kind is not torch.nn.Parameter:
            return NotImplemented
        if not _qualifies(obj, _min_bytes()):
            return NotImplemented
        idx = self.arena.write_tensor(obj)
        if idx is None:
            return NotImplemented
        gen = self.arena._arena.seq_gen(idx)[1]
        return _rebuild_arena_tensor, (
            self.arena.handle()[3], idx, gen, obj.numel() * obj.element_size(),
            str(obj.dtype).removeprefix("torch."), tuple(obj.shape), kind is not torch.Tensor,
        )
