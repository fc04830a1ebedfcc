"""Pickle protocol 5 with large buffers out of band.

:meth:`Serializer.dumps` returns a :data:`~.wire.Pickled` ``(stream, buffers,
lend)``: the pickle stream as ``bytes``; as byte-format memoryviews over the
object's own memory, every buffer of at least ``oob_threshold`` bytes -- numpy
arrays and other ``PickleBuffer`` producers anywhere in the object, and a
top-level ``bytes`` or ``bytearray``; and whether the reader may lend the
unpickler views of them (a top-level ``bytes``/``bytearray``, copied anyway).
No copy is made of those while serializing; the transport then copies each
once per channel, before ``enqueue`` returns (into a ring chunk, or into
libzmq's memory as a socket sends the frame).

Why ``pickle.dumps`` while torch is not imported: a ``Pickler(io.BytesIO)``
reused with ``clear_memo()`` costs more per small object (``python -m bench
queue_roundtrip`` measures it): ``dump(file)`` adds a ``write`` call, a copy
into the file and a copy back out. Without a
Pickler there is no ``reducer_override`` either, so a large ``bytes`` nested
in a container is pickled in band (one extra copy on the writer).

**CPU tensors.** Once ``torch`` has been imported by the application (this
module never imports it: it looks in ``sys.modules``), every ``torch.Tensor``
goes through :func:`reduce_tensor`, the one rule (vLLM's ``_reduce_tensor``, which
:mod:`verifiedring.compat.vllm` re-exports; after its ``install()`` the queue calls
that module's name at each tensor, as the engine policy's ``tensor_reducer``): one of exact
type on the CPU, strided, not requiring grad, travels as
``rebuild_tensor(buffer, shape, dtype)`` over one protocol-5 buffer of its
bytes: out of band from ``oob_threshold`` bytes, in band below. A contiguous
tensor's buffer is its own memory (no copy); a non-contiguous one is made
contiguous first (``Tensor.contiguous``: the one extra copy, on the writer).
The reader's tensor is a view over the received buffer -- the bytearray taken
out of the ring chunk, or the socket frame -- with the writer's dtype and
shape, contiguous strides and ``requires_grad=False``, as torch's own pickling
gives for a contiguous tensor (bfloat16 and bool included; two tensors that
shared a storage arrive with a storage each). Any other tensor (requiring
grad, on another device, sparse, a subclass such as ``Parameter``, or one
with the conjugate/negative bit) is pickled exactly as torch pickles it.
This needs a ``Pickler`` with a private ``dispatch_table``: one per
Serializer, reused (``clear_memo``), writing to a sink whose ``write`` is
``list.append``, so the pickler's own output bytes are the stream as with
``dumps`` (``python -m bench tensor_arena --small`` compares it with
``pickle.dumps``, a reused ``io.BytesIO``, a fresh Pickler and a
``reducer_override``, a Python call per object). Without torch imported the
``pickle.dumps`` path is unchanged (one ``sys.modules`` lookup).

**The tensor arena**, a plug-in of the serializer (writer
``enable_shm_tensor_arena=True``, every reader local, see :mod:`verifiedring.arena`;
:class:`ArenaOptions`, :func:`arena_writer`): a tensor that ``arena.qualifies``
(contiguous CPU, at least ``ARENA_MIN_BYTES``) is copied once into a free arena slot
and pickled as a stub, before the rule above is called; with no free slot it takes the
path above (the writer never waits). The message itself goes inline, as an overflow
frame or as a run, as any other; the reader half is an
:class:`~verifiedring.arena.ArenaReader` that the local reader points at each
message's sequence number before it unpickles.

A failure to pickle raises :class:`MisuseError` naming the type, before
anything is published (arena slots it claimed are reclaimed by the next
message, which has the same sequence number).
"""

from __future__ import annotations

import copyreg
import pickle
import sys
from dataclasses import dataclass
from typing import Any, Protocol

from .. import engine
from ..arena import DEFAULT_SLOT_BYTES, DEFAULT_SLOTS, ArenaWriter
from ..errors import MisuseError
from .wire import Pickled

PROTOCOL = 5
#: Buffers smaller than this stay inside the pickle stream (a frame per tiny
#: buffer costs more than the copy it saves).
DEFAULT_OOB_THRESHOLD = 64 * 1024

_BYTES_TYPES = (bytes, bytearray)


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


#: What the serializer holds between calls: no reference to the last object's memory.
_NO_BUFFERS: list[memoryview] = []


class _OutOfBand:
    """Pickles a ``bytes``/``bytearray`` as its type applied to one out-of-band buffer."""

    __slots__ = ("obj",)

    def __init__(self, obj: bytes | bytearray) -> None:
        self.obj = obj

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (type(self.obj), (pickle.PickleBuffer(self.obj),))


class _Parts:
    """A file for the reused Pickler: each ``write`` appends to ``parts``."""

    __slots__ = ("write",)

    def __init__(self, parts: list[Any]) -> None:
        self.write = parts.append


def rebuild_tensor(buf: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """The reader's tensor over ``buf`` (vLLM's ``_rebuild_tensor``): no copy when
    ``buf`` is writable (a ``bytearray`` taken out of a ring chunk, a socket frame);
    a read-only buffer is copied once, so the tensor is always writable."""
    import torch

    if isinstance(buf, bytes) or (isinstance(buf, memoryview) and buf.readonly):
        buf = bytearray(buf)  # a read-only buffer: the one copy on the reader
    if not len(buf):
        return torch.empty(shape, dtype=getattr(torch, dtype))
    return torch.frombuffer(buf, dtype=torch.uint8).view(getattr(torch, dtype)).view(shape)


def reduce_tensor(t: Any) -> Any:
    """The one reduction rule of a ``torch.Tensor`` (vLLM's ``_reduce_tensor``): a
    CPU strided tensor of exact type ``Tensor``, not requiring grad, becomes
    ``rebuild_tensor`` over one ``PickleBuffer`` of its bytes -- its own memory when
    contiguous, else one contiguous copy. Anything else (requiring grad, on another
    device, sparse, a subclass, the conjugate/negative bit) gets torch's own
    reduction, ``t.__reduce_ex__(5)``."""
    import torch

    if (type(t) is torch.Tensor and t.device.type == "cpu" and t.layout == torch.strided
            and not t.requires_grad):
        try:
            raw: Any = t.contiguous().reshape(-1).view(torch.uint8).numpy()
        except RuntimeError:  # conjugate/negative bit: no aliasing view
            pass
        else:
            dtype = str(t.dtype).removeprefix("torch.")
            return rebuild_tensor, (pickle.PickleBuffer(raw), tuple(t.shape), dtype)
    return t.__reduce_ex__(PROTOCOL)


class Sink(Protocol):
    """The file :meth:`Serializer.dump_into` pickles one message into (the run flavor's
    :class:`~.flavors.run.writer.Spill`): named here, so the serializer imports no
    flavor."""

    def write(self, b: Any) -> int: ...

    def keep_out_of_band(self, buf: memoryview) -> bool:
        """Whether the sink takes ``buf`` out of band (kept with the message); else the
        pickler writes it in band."""
        ...

    def raised(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the sink's own (not the pickler's failure)."""
        ...

    def finish(self, wrapped: bool) -> Pickled | None:
        """The message as :meth:`Serializer.dumps` returns it if it fit one chunk
        (``wrapped``: the object's bytes went out of band whole); ``None`` if it went
        into a run (its caller finishes it)."""
        ...


class Serializer:
    """Pickles one object at a time. Not thread-safe; one per queue end.

    ``arena``: the writer's tensor arena, or ``None``."""

    def __init__(
        self, oob_threshold: int = DEFAULT_OOB_THRESHOLD, arena: ArenaWriter | None = None
    ) -> None:
        self._threshold = oob_threshold
        self._oob: list[memoryview] = []
        self._arena = arena
        self._parts: list[Any] = []  # what the reused Pickler wrote for one object
        self._pickler: pickle.Pickler | None = None  # made once torch is imported
        self._n_global_reducers = -1  # _table_key() when the table was built
        self._sink: Sink | None = None  # the file of dump_into's call in progress
        self._sink_pickler: tuple[Sink, pickle.Pickler, int] | None = None

    def _keep(self, buf: pickle.PickleBuffer) -> bool:
        """The pickler's buffer callback: false takes ``buf`` out of band (into the
        message's buffers, or the sink's), true serializes it in band."""
        raw = buf.raw()
        if raw.nbytes >= self._threshold:
            sink = self._sink
            if sink is None:
                self._oob.append(raw)
                return False
            if sink.keep_out_of_band(raw):
                return False
        raw.release()
        return True

    def _reduce_tensor(self, t: Any) -> Any:
        """The dispatch entry with an arena or a reducer hook: a qualifying tensor
        as a stub in the arena, else the hook's (or the one rule's) reduction."""
        arena = self._arena
        if arena is not None:
            stub = arena.put(t)
            if stub is not None:
                return stub
        hook = engine.policy.tensor_reducer  # EnginePolicy: None is reduce_tensor
        return reduce_tensor(t) if hook is None else hook(t)

    def _table_key(self) -> int:
        """What the dispatch table depends on: the global reducers and the hook's presence."""
        return 2 * len(copyreg.dispatch_table) + (engine.policy.tensor_reducer is not None)

    def _new_pickler(self, file: Any, torch: Any) -> pickle.Pickler:
        """A Pickler writing to ``file``; with ``torch``, its private dispatch table
        routes ``torch.Tensor``."""
        pickler = pickle.Pickler(file, protocol=PROTOCOL, buffer_callback=self._keep)
        if torch is not None:
            table = dict(copyreg.dispatch_table)  # globally registered reducers stay
            direct = self._arena is None and engine.policy.tensor_reducer is None
            table[torch.Tensor] = reduce_tensor if direct else self._reduce_tensor
            pickler.dispatch_table = table
        return pickler

    def _tensor_pickler(self, torch: Any) -> pickle.Pickler:
        """The reused Pickler whose private dispatch table routes ``torch.Tensor``."""
        pickler = self._pickler
        key = self._table_key()
        if pickler is None or key != self._n_global_reducers:
            pickler = self._new_pickler(_Parts(self._parts), torch)
            self._pickler = pickler
            self._n_global_reducers = key
        return pickler

    def _pickler_into(self, sink: Sink) -> pickle.Pickler:
        """The reused Pickler writing to ``sink`` (its table as :meth:`_tensor_pickler`'s
        once torch is imported)."""
        torch = sys.modules.get("torch")
        key = -1 if torch is None else self._table_key()
        made = self._sink_pickler
        if made is None or made[0] is not sink or made[2] != key:
            made = (sink, self._new_pickler(sink, torch), key)
            self._sink_pickler = made
        return made[1]

    def _target(self, obj: object) -> object:
        """What is pickled for ``obj``: a large ``bytes`` / ``bytearray`` as one
        out-of-band buffer (:class:`_OutOfBand`), anything else as itself."""
        if type(obj) in _BYTES_TYPES and len(obj) >= self._threshold:  # type: ignore[arg-type]
            return _OutOfBand(obj)  # type: ignore[arg-type]
        return obj

    def dump_into(self, obj: object, sink: Sink) -> Pickled | None:
        """``obj`` pickled into ``sink`` (armed by the caller): what fits one chunk is
        returned as :meth:`dumps` returns it; a larger object went into a run of
        chunks as it was pickled (``None``; the caller finishes the run). Raises
        :class:`MisuseError` if it cannot be pickled (the run, if begun, is left
        for the caller to abort), and what ``sink`` itself raised, unchanged."""
        self._sink = sink
        target = self._target(obj)
        if self._arena is not None:
            self._arena.begin()
        pickler = self._pickler_into(sink)
        try:
            pickler.dump(target)
        except Exception as exc:
            if sink.raised(exc):
                raise
            raise self._unpicklable(obj, exc) from exc
        finally:
            pickler.clear_memo()
            self._sink = None
        return sink.finish(target is not obj)

    @staticmethod
    def _unpicklable(obj: object, exc: Exception) -> MisuseError:
        return MisuseError(
            f"cannot serialize object of type {type(obj).__module__}."
            f"{type(obj).__qualname__} with pickle protocol {PROTOCOL}: "
            f"{type(exc).__name__}: {exc}; nothing was sent"
        )

    def dumps(self, obj: object) -> Pickled:
        """``obj`` pickled; raises :class:`MisuseError` naming its type if it cannot be."""
        oob: list[memoryview] = []
        self._oob = oob
        target = self._target(obj)
        torch = sys.modules.get("torch")
        try:
            if torch is None:
                stream = pickle.dumps(target, protocol=PROTOCOL, buffer_callback=self._keep)
            else:
                if self._arena is not None:
                    self._arena.begin()
                pickler = self._tensor_pickler(torch)
                parts = self._parts
                # emptied first too: a dump whose cleanup an interrupt cut left its memo
                # and its bytes, which the next message would carry
                pickler.clear_memo()
                parts.clear()
                try:
                    pickler.dump(target)
                    # one part: the pickler's own bytes; more: a large payload written
                    # as itself (a bytes or bytearray of the object) between them
                    stream = parts[0] if len(parts) == 1 else b"".join(parts)
                finally:
                    pickler.clear_memo()
                    parts.clear()
        except Exception as exc:
            self._oob = []
            raise self._unpicklable(obj, exc) from exc
        self._oob = _NO_BUFFERS
        return stream, oob, target is not obj
