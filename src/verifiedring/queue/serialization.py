"""Pickle protocol 5 with large buffers out of band.

:meth:`Serializer.dumps` returns ``(stream, buffers)``: the pickle stream as
``bytes`` and, as byte-format memoryviews over the object's own memory, every
buffer of at least ``oob_threshold`` bytes -- numpy arrays and other
``PickleBuffer`` producers anywhere in the object, and a top-level ``bytes`` or
``bytearray``. No copy is made of those while serializing; the transport then
copies each exactly once (into a ring chunk, or into a socket frame when the
buffer is writable; a read-only one is sent without copying).

Why ``pickle.dumps`` and not a reused ``Pickler`` over a reused buffer:
measured on CPython 3.11 (``python -m bench queue_roundtrip`` prints it), a
``Pickler(io.BytesIO)`` reused with ``clear_memo()`` costs ~2-3 us per small
object against ~0.7 us for ``pickle.dumps``: the C pickler already builds its
output in an internal buffer that ``dumps`` hands over without copying, while
``dump(file)`` adds a ``write`` call, a copy into the file and a view to take
it back out. A reducer_override (which would also move *nested* large
``bytes`` out of band) needs a Pickler instance, and is therefore limited to
the top level; a large ``bytes`` nested in a container is pickled in band
(one extra copy on the writer).

A failure to pickle raises :class:`MisuseError` naming the type, before any
shared state is touched.
"""

from __future__ import annotations

import pickle
from typing import Any

from ..errors import MisuseError

PROTOCOL = 5
#: Buffers smaller than this stay inside the pickle stream (a frame per tiny
#: buffer costs more than the copy it saves).
DEFAULT_OOB_THRESHOLD = 64 * 1024

_BYTES_TYPES = (bytes, bytearray)
#: What the serializer holds between calls: no reference to the last object's memory.
_NO_BUFFERS: list[memoryview] = []


#: One serialized object, what the writer stores or sends: ``(stream, buffers, lend)``.
#: A plain tuple: it is made once per message on the hot path.
Pickled = tuple[bytes, list[memoryview], bool]


class _OutOfBand:
    """Pickles a ``bytes``/``bytearray`` as its type applied to one out-of-band buffer."""

    __slots__ = ("obj",)

    def __init__(self, obj: bytes | bytearray) -> None:
        self.obj = obj

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (type(self.obj), (pickle.PickleBuffer(self.obj),))


class Serializer:
    """Pickles one object at a time. Not thread-safe; one per queue end."""

    def __init__(self, oob_threshold: int = DEFAULT_OOB_THRESHOLD) -> None:
        self._threshold = oob_threshold
        self._oob: list[memoryview] = []

    def _keep(self, buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < self._threshold:
            raw.release()
            return True  # true: serialize this buffer in band
        self._oob.append(raw)
        return False

    def dumps(self, obj: object) -> Pickled:
        """``obj`` pickled; raises :class:`MisuseError` naming its type if it cannot be."""
        oob: list[memoryview] = []
        self._oob = oob
        target = obj
        if type(obj) in _BYTES_TYPES and len(obj) >= self._threshold:  # type: ignore[arg-type]
            target = _OutOfBand(obj)  # type: ignore[arg-type]
        try:
            stream = pickle.dumps(target, protocol=PROTOCOL, buffer_callback=self._keep)
        except Exception as exc:
            self._oob = []
            raise MisuseError(
                f"cannot serialize object of type {type(obj).__module__}."
                f"{type(obj).__qualname__} with pickle protocol {PROTOCOL}: "
                f"{type(exc).__name__}: {exc}; nothing was sent"
            ) from exc
        self._oob = _NO_BUFFERS
        return stream, oob, target is not obj
