"""The shared-memory tensor arena: a large CPU tensor copied once, viewed by every local reader.

A writer made with ``enable_shm_tensor_arena=True`` (and no remote reader:
a remote reader cannot map the writer's memory, so such a queue has no
arena, as in vLLM) owns one more segment of ``n_slots`` slots of
``slot_bytes`` each. Per slot it holds ``seq`` and ``gen`` (u64: the message
and the claim that filled it) and one *owes* byte per local reader (1: that
reader may still view the slot): the byte layout and who stores each byte are
:class:`~verifiedring.layout.ArenaLayout`'s. ``spec/arena/TensorArena.tla`` is the model;
the ``# spec:`` comments name its actions.

* Writer (:class:`ArenaWriter`, inside ``Serializer.dumps``): a tensor that
  :func:`qualifies` (contiguous, CPU, at least :data:`ARENA_MIN_BYTES`) claims
  (:meth:`ArenaWriter.claim`) a slot whose owes
  bytes are all 0 -- or one claimed for a message that was never published
  (``seq`` >= the next sequence number: its pickling or its ring wait
  failed), stores ``seq``, ``gen`` and every owes byte = 1, copies the tensor
  in (the one copy) and pickles a stub ``(arena, slot, gen, offset, nbytes,
  dtype, shape)``. No such slot: ``None``, and the tensor takes the
  out-of-band path; the writer never waits for a reader.
* Reader (:class:`ArenaReader`): the stub becomes a tensor over the slot's
  memory (``torch.from_numpy`` of a numpy array over the mapping: no copy).
  The tensor's storage holds that array (every tensor this reader rebuilds from
  one claim holds the same one); when the last storage is freed a finalizer
  stores the reader's owes byte = 0 (one an interrupt cut: the next sweep). At
  each dequeue's start, and at close, the reader also clears the byte of every
  slot it does not view whose message it has consumed (one that failed to
  decode; at close, any). A finalizer runs in whatever thread frees the
  storage: releases, sweeps and a view's registration take the reader's lock.
* Memory order (``spec/arena/TensorArenaRelaxed.tla``): the ring publishes the
  message after the writer's stores above and the reader loads the slot after
  taking it (the ring's fences order them); a fence precedes each release
  store (FA3: the view's loads before it; FA2 in the sweep) and follows the
  writer's loads that found a slot free (FA1); the claim's seq store precedes
  its owes stores (FA4) and the sweep's owes load its seq load (FA5), so a
  sweep that loads a new claim's byte 1 loads that claim's seq (not consumed).
  The writer unlinks the segment's name once every reader has attached, as
  the ring's.
* A queue's reader announces itself to the engine policy's ``arena_attach``
  (:class:`~verifiedring.engine.EnginePolicy`; compat: vLLM's registry of reader arenas).

A reader that closes while viewing slots keeps the mapping until the last view
is gone. The ``n_slots * slot_bytes`` pages are reserved at create (as the ring's).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import engine
from .errors import require_int
from .layout import ARENA_META, ArenaLayout
from .ordering import fence
from .shm import ARENA_SEGMENT, SharedSegment

#: The smallest tensor placed in the arena (as vLLM); smaller ones go out of band.
ARENA_MIN_BYTES = 8 * 1024 * 1024
DEFAULT_SLOTS = 4
DEFAULT_SLOT_BYTES = 128 * 1024 * 1024
_META = ARENA_META  # seq, gen; then one owes byte per reader (layout.ArenaLayout)


def qualifies(t: Any, min_bytes: int) -> bool:
    """Whether tensor ``t`` may go into the arena: on the CPU, strided, contiguous,
    not requiring grad, of at least ``min_bytes`` bytes (the slot size is checked
    at the claim)."""
    import torch

    return (t.device.type == "cpu" and t.layout == torch.strided and not t.requires_grad
            and t.is_contiguous() and t.numel() * t.element_size() >= min_bytes)


@dataclass(frozen=True)
class ArenaHandle(tuple[int, int, int, str]):
    """What a local reader needs to attach to the arena (picklable). A tuple in vLLM's
    order, ``(n_reader, slot_bytes, n_slots, name)``, as vLLM's ``tensor_arena_handle``
    unpacks; a frozen dataclass too (``dataclasses.replace`` works)."""

    name: str
    n_reader: int
    n_slots: int
    slot_bytes: int

    def __new__(cls, name: str, n_reader: int, n_slots: int, slot_bytes: int) -> ArenaHandle:
        return super().__new__(cls, (n_reader, slot_bytes, n_slots, name))

    def __getnewargs__(self) -> tuple[str, int, int, int]:
        return self.name, self.n_reader, self.n_slots, self.slot_bytes  # pickle: __new__'s

    @property
    def layout(self) -> ArenaLayout:
        """The segment's byte layout (:class:`~verifiedring.layout.ArenaLayout`)."""
        return ArenaLayout(self.n_reader, self.n_slots, self.slot_bytes)


class _Arena:
    """The mapped segment and its per-slot metadata."""

    def __init__(self, handle: ArenaHandle, segment: SharedSegment) -> None:
        self.handle = handle
        self.segment = segment
        self.layout = layout = handle.layout
        self._meta = layout.meta_bytes
        self._owes = layout.owes_offset(0)

    def owes(self, slot: int) -> memoryview:
        start = slot * self._meta + self._owes
        return self.segment.buf[start : start + self.handle.n_reader]

    def seq_gen(self, slot: int) -> tuple[int, int]:
        seq, gen = _META.unpack_from(self.segment.buf, slot * self._meta)
        return seq, gen

    def offset(self, slot: int) -> int:
        return self.layout.slot_offset(slot)


class ArenaWriter(_Arena):
    """The writer's side: claim, copy, stub. ``next_seq()`` is the sequence number
    the message being pickled will have."""

    def __init__(
        self, n_reader: int, next_seq: Callable[[], int], n_slots: int = DEFAULT_SLOTS,
        slot_bytes: int = DEFAULT_SLOT_BYTES,
    ) -> None:
        for what, value in (("n_slots", n_slots), ("slot_bytes", slot_bytes)):
            require_int(f"tensor arena {what}", value)
        probe = ArenaHandle("", n_reader, n_slots, slot_bytes)
        segment = SharedSegment.create(probe.layout.total_bytes, what=ARENA_SEGMENT)
        super().__init__(ArenaHandle(segment.name, n_reader, n_slots, slot_bytes), segment)
        self._next_seq = next_seq
        self._next_slot = 0
        self._gen = 0
        self._claimed: list[int] = []  # slots claimed by the message being pickled
        self.copies = 0  # tensors copied in (one copy each)
        self.fallbacks = 0  # tensors that found no free slot

    def begin(self) -> None:
        """A new message is being pickled."""
        self._claimed = []

    def _free(self, slot: int, seq: int) -> bool:
        if slot in self._claimed:
            return False
        owes = self.owes(slot)
        try:
            return not any(owes) or self.seq_gen(slot)[0] >= seq
        finally:
            owes.release()

    def put(self, t: Any) -> tuple[Any, tuple[Any, ...]] | None:
        """The reduction of ``t`` copied into a free slot if it :func:`qualifies` for
        the arena (from :data:`ARENA_MIN_BYTES`), or ``None`` (the caller falls back)."""
        if not qualifies(t, ARENA_MIN_BYTES):
            return None
        claimed = self.claim(t)
        if claimed is None:
            return None
        slot, gen = claimed
        dtype = str(t.dtype).removeprefix("torch.")
        nbytes = t.numel() * t.element_size()
        return _rebuild_arena, (self.handle.name, slot, gen, self.offset(slot), nbytes, dtype,
                                tuple(t.shape))

    def claim(self, t: Any) -> tuple[int, int] | None:
        """Copy CPU tensor ``t``'s bytes into a free slot: ``(slot, gen)``, or ``None``
        (larger than a slot, no aliasing byte view, or no free slot)."""
        import numpy as np
        import torch

        nbytes = t.numel() * t.element_size()
        h = self.handle
        if nbytes > h.slot_bytes:
            return None
        try:
            src = t.detach().reshape(-1).view(torch.uint8).numpy()
        except RuntimeError:
            return None
        seq = self._next_seq()
        for probe in range(h.n_slots):
            slot = (self._next_slot + probe) % h.n_slots
            if self._free(slot, seq):
                break
        else:
            # spec: ArenaFallback -- no free slot: the tensor goes out of band, no wait
            self.fallbacks += 1
            return None
        fence()  # FA1: the owes loads that found the slot free before the stores below
        # spec: ArenaClaim -- seq, gen, then every reader's owes byte = 1
        self._gen += 1
        _META.pack_into(self.segment.buf, slot * self._meta, seq, self._gen)
        fence()  # FA4: the seq/gen store before the owes stores (a sweep seeing 1 sees the seq)
        with self.owes(slot) as owes:
            owes[:] = b"\x01" * h.n_reader
        self._claimed.append(slot)
        self._next_slot = (slot + 1) % h.n_slots
        dst = np.frombuffer(self.segment.buf, np.uint8, nbytes, self.offset(slot))
        # spec: ArenaCopy -- the tensor's bytes into the slot: the one copy
        np.copyto(dst, src)
        del dst
        self.copies += 1
        return slot, self._gen

    def unlink(self) -> None:
        """Remove the segment's name (every reader has attached)."""
        self.segment.unlink()

    def close(self) -> None:
        self.segment.close()
        self.segment.unlink()


_current = threading.local()  # .reader: the arena reader whose dequeue runs in this thread
_READERS: weakref.WeakSet[ArenaReader] = weakref.WeakSet()  # every live one, for a fork


def _forked_readers_store_nothing() -> None:
    """In a process just forked: each inherited arena reader gets a fresh lock (a thread
    of the parent may have held it at the fork: it would never be released here) and
    stores nothing from now on (its finalizers, sweeps and close would clear the
    parent's owes bytes while the parent views the slots: ``MCTensorArenaFork`` in
    ``spec/arena/``)."""
    for reader in list(_READERS):
        reader._lock = threading.RLock()
        reader._inherited = True


os.register_at_fork(after_in_child=_forked_readers_store_nothing)


class ArenaReader(_Arena):
    """Local reader ``index``'s side: stubs become views; views' deaths release.

    A view's finalizer runs in whatever thread drops its last reference (or the
    collector's); the dequeuing thread sweeps and rebuilds. So every step on
    ``_viewed``/``_bases`` and this reader's owes bytes -- a release (a view's
    death), the sweep of :meth:`begin`/:meth:`close`, a view's
    registration in :meth:`rebuild` -- runs under one lock, each one step
    (``spec/arena/TensorArena.tla``, ``ReleaseDesign = "locked"``): a release either finds
    its view still the slot's current one and stores 0, or does nothing. The lock
    is reentrant: a collection inside a step may run a finalizer in that thread.
    """

    def __init__(self, handle: ArenaHandle, index: int, announce: bool = True) -> None:
        """Attach as local reader ``index``; ``announce``: pass this reader to the
        engine policy's ``arena_attach`` (a queue's readers do)."""
        super().__init__(handle, SharedSegment.attach(handle.name, handle.layout.total_bytes))
        self.index = index
        self._lock = threading.RLock()
        self._viewed: dict[int, int] = {}  # slot -> gen of the live view
        # slot -> (gen, base number, the array every view of that base holds): one
        # finalizer per base; a later base of the slot (even of the same claim) makes
        # the finalizers of the earlier ones no-ops
        self._bases: dict[int, tuple[int, int, weakref.ref[Any] | None]] = {}
        #: Dead bases, appended by a C callback (no interrupt lands in it): a release an
        #: interrupt cut in the finalizer is made by the next sweep (:meth:`_settle_died`)
        self._died: list[weakref.ref[Any]] = []
        self._made = 0  # bases made so far
        #: Slots released because their last view's storage was freed, since the slot
        #: was last viewed or :meth:`forget_freed` (vLLM's ``_pending_release``; at most
        #: one entry per slot).
        self.freed: dict[int, None] = {}
        self._closed = False
        #: True in a process forked from this reader's: it is not this reader, so it
        #: stores nothing in the arena (:func:`_forked_readers_store_nothing`)
        self._inherited = False
        _READERS.add(self)
        hook = engine.policy.arena_attach
        if announce and hook is not None:
            hook(self)

    def begin(self, consumed_below: int) -> None:
        """Before a dequeue: stubs decode against this reader; slots of consumed
        messages that it does not view are released."""
        _current.reader = self
        self._drop(consumed_below)

    def _drop(self, consumed_below: int | None) -> None:
        with self._lock:
            if self._inherited:
                return
            self._settle_died()
            for slot in range(self.handle.n_slots):
                if slot in self._viewed:
                    continue
                with self.owes(slot) as owes:
                    if not owes[self.index]:
                        continue
                    fence()  # FA5: the owes load before the seq load (the claim's FA4 pair)
                    if consumed_below is None or self.seq_gen(slot)[0] < consumed_below:
                        fence()  # FA2: the seq load before the release store
                        # spec: ArenaDropRelease -- a consumed (or, at close, any) unviewed slot
                        owes[self.index] = 0

    def rebuild(
        self, slot: int, gen: int, offset: int, nbytes: int, dtype: str, shape: tuple[int, ...]
    ) -> Any:
        """A tensor over claim ``gen`` of ``slot``: a view of the slot's live base of
        that claim, or of a new base, registered (``viewed``) before it is returned."""
        import numpy as np
        import torch

        h = self.handle
        if not (0 <= slot < h.n_slots and offset == self.offset(slot) and nbytes <= h.slot_bytes):
            raise ValueError(f"arena stub slot {slot} offset {offset} nbytes {nbytes} does "
                             f"not fit arena {h.name!r} ({h.n_slots} x {h.slot_bytes} bytes)")
        seq, found = self.seq_gen(slot)
        if found != gen:
            raise ValueError(f"arena {h.name!r} slot {slot} holds claim {found} (message seq "
                             f"{seq}), the stub expects claim {gen}: the slot was reused")
        with self._lock:
            # spec: ArenaRebuild -- a view over the slot, registered; its storage owns the array
            base = self._bases.get(slot)
            ref = base[2] if base is not None and base[0] == gen else None
            whole = ref() if ref is not None and self._viewed.get(slot) == gen else None
            if whole is None:
                self._made += 1
                made = self._made
                # the number first: the finalizer of an earlier base (run by a collection
                # below, or waiting for the lock) finds a newer one and does nothing
                self._bases[slot] = (gen, made, None)
                whole = np.frombuffer(self.segment.buf, np.uint8, h.slot_bytes, offset)
                self._bases[slot] = (gen, made, weakref.ref(whole, self._died.append))
                self._viewed[slot] = gen
                self.freed.pop(slot, None)
                weakref.finalize(whole, self._release, slot, made)
        holder = whole[:nbytes]  # holds ``whole``: the slot is released once every view is gone
        return torch.from_numpy(holder).view(getattr(torch, dtype)).view(shape)

    def _release(self, slot: int, made: int) -> None:
        """A base's finalizer."""
        fence()  # FA3: every load of the view's bytes before the release store
        with self._lock:
            self._release_base(slot, made)

    def _release_base(self, slot: int, made: int) -> None:
        """Owes byte 0 and :attr:`freed` for ``slot`` if viewed through base ``made``."""
        base = self._bases.get(slot)
        if base is None or base[1] != made or self._inherited:
            return
        if self._viewed.get(slot) is None:
            return
        with self.owes(slot) as owes:
            # spec: ArenaRelease -- the view's storage was freed
            owes[self.index] = 0
        self._viewed.pop(slot, None)
        self.freed[slot] = None

    def _settle_died(self) -> None:
        """The releases of dead bases (lock held); one leaves :attr:`_died` once handled
        (a cut sweep leaves it to the next; a second handling changes nothing). The
        view's loads were the dropping thread's, before its callback's append: the GIL's
        hand-off orders them before this store, as FA3 does in the finalizer's thread."""
        for ref in list(self._died):
            for slot, (_, made, base_ref) in list(self._bases.items()):
                if base_ref is ref:
                    self._release_base(slot, made)
            self._died.remove(ref)

    def forget_freed(self) -> None:
        """Empty :attr:`freed` (vLLM's ``flush_releases``)."""
        with self._lock:
            self.freed.clear()

    @property
    def viewed(self) -> dict[int, int]:
        """Slots this reader views now (slot -> claim)."""
        with self._lock:
            return dict(self._viewed)

    def close(self) -> None:
        """Release every slot not viewed; unmap now if none is viewed (else the last
        view's death leaves the mapping to be collected)."""
        if self._closed:
            return
        self._closed = True
        if getattr(_current, "reader", None) is self:
            _current.reader = None
        with self._lock:
            self._drop(None)
            if not self._viewed:
                self.segment.close()


def _rebuild_arena(
    name: str, slot: int, gen: int, offset: int, nbytes: int, dtype: str, shape: tuple[int, ...]
) -> Any:
    """Unpickling hook: the tensor the stub names, from the dequeuing reader's arena."""
    reader: ArenaReader | None = getattr(_current, "reader", None)
    if reader is None or reader.handle.name != name:
        raise ValueError(
            f"tensor arena {name!r}: its stub was unpickled outside a dequeue of that "
            "arena's local reader"
        )
    return reader.rebuild(slot, gen, offset, nbytes, dtype, shape)
