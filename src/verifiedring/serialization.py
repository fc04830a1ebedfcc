"""Pickle protocol 5 into a reused buffer, with large buffers out of band.

:class:`Serializer` pickles one object at a time into an ``io.BytesIO`` it
keeps for its whole life (written from position 0 each time, never truncated,
so its allocation is reused), through one reused ``pickle.Pickler`` whose memo
is cleared per object. Buffers of at least ``oob_threshold`` bytes -- numpy
arrays and other ``PickleBuffer`` producers, and ``bytes``/``bytearray`` via
:meth:`_OOBPickler.reducer_override` -- leave the pickle stream as raw
memoryviews over the caller's memory: no copy is made while serializing. The
transport then copies each one exactly once (into a ring chunk, or into a
socket frame when the buffer is writable; a read-only buffer is sent without
copying).

A failure to pickle raises :class:`MisuseError` naming the type, before any
shared state is touched.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from .errors import MisuseError

PROTOCOL = 5
#: Buffers smaller than this stay inside the pickle stream (a frame per tiny
#: buffer costs more than the copy it saves).
DEFAULT_OOB_THRESHOLD = 64 * 1024

_BYTES_TYPES = (bytes, bytearray)


class _OOBPickler(pickle.Pickler):
    """A Pickler that also sends large ``bytes``/``bytearray`` out of band."""

    oob_threshold = DEFAULT_OOB_THRESHOLD

    def reducer_override(self, obj: Any) -> Any:
        # Called for every non-atomic object: keep the common case to one test.
        if type(obj) in _BYTES_TYPES and len(obj) >= self.oob_threshold:
            return (type(obj), (pickle.PickleBuffer(obj),))
        return NotImplemented


class Serializer:
    """Reusable pickler. Not thread-safe; one per queue end.

    :meth:`dumps` returns ``(stream, buffers)``: ``stream`` is a memoryview
    over the reused buffer, valid until the next call to :meth:`dumps`;
    ``buffers`` are byte-format memoryviews over the object's own memory.
    """

    def __init__(self, oob_threshold: int = DEFAULT_OOB_THRESHOLD) -> None:
        self._bio = io.BytesIO()
        self._oob: list[memoryview] = []
        self._threshold = oob_threshold
        self._pickler = _OOBPickler(self._bio, protocol=PROTOCOL, buffer_callback=self._keep)
        self._pickler.oob_threshold = oob_threshold
        self._view: memoryview | None = None

    def _keep(self, buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < self._threshold:
            raw.release()
            return True  # true: serialize this buffer in band
        self._oob.append(raw)
        return False

    def dumps(self, obj: object) -> tuple[memoryview, list[memoryview]]:
        if self._view is not None:
            self._view.release()
            self._view = None
        self._oob = oob = list[memoryview]()
        bio = self._bio
        bio.seek(0)
        pickler = self._pickler
        pickler.clear_memo()
        try:
            pickler.dump(obj)
        except Exception as exc:
            self._oob = []
            raise MisuseError(
                f"cannot serialize object of type {type(obj).__module__}."
                f"{type(obj).__qualname__} with pickle protocol {PROTOCOL}: "
                f"{type(exc).__name__}: {exc}; nothing was sent"
            ) from exc
        with bio.getbuffer() as whole:
            self._view = view = whole[: bio.tell()]
        return view, oob

    def release(self) -> None:
        """Drop the references to the last object's memory."""
        if self._view is not None:
            self._view.release()
            self._view = None
        self._oob = []

