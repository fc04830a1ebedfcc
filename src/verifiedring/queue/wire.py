"""The message queue's wire format: kinds, header, chunk and frame, encode beside decode.

Every message starts with one header (:data:`HEADER`, little endian)::

    kind     u8    INLINE (0) | OVERFLOW (1) | READY (2) | SHUTDOWN (3) | INLINE_LENT (4)
                   | RUN_FIRST (5) | RUN_MORE (6) | RUN_LAST (7) | RUN_ABORT (8)
    seq      u64   the message's sequence number (SHUTDOWN: messages sent in all)
    nstream  u64   bytes of the pickle stream (a run chunk: its bytes of the run)
    nbuf     u32   number of out-of-band buffers (a run chunk: its part, 0, 1, ...)

followed, for INLINE, INLINE_LENT and OVERFLOW, by ``nbuf`` u64 buffer lengths
(:data:`LENGTH`).

* **Ring chunk, INLINE**: header, lengths, stream, buffers -- all in the chunk.
  INLINE_LENT is the same for an object whose reconstruction copies its
  buffers anyway (a top-level ``bytes``/``bytearray``): the reader lends the
  unpickler views of the chunk instead of copying them out first.
* **Ring chunk, OVERFLOW** (the overflow marker): the header only; the object
  travels on the local socket as the frame with the same ``seq``.
* **Run** (``large_objects="stream"``, :mod:`.run`): a message too large for one
  chunk, as chunks RUN_FIRST (part 0), RUN_MORE (1, 2, ...), then RUN_LAST or
  RUN_ABORT, all with its ``seq``. Their bytes, in order, are one byte string:
  ``u64 nbuf``, ``nbuf`` u64 lengths, the buffers, the pickle stream. RUN_ABORT's
  bytes are the writer's reason, UTF-8 (its pickling raised mid-message).
* **Frame** (local socket, and remote socket after its MAC part):
  ``[header, stream, *buffers]`` with ``kind == OVERFLOW``.
* **Control frame**: ``[header]`` with ``kind`` READY or SHUTDOWN.

Whether an object fits in a chunk is decided by one rule,
:meth:`verifiedring.layout.RingLayout.fits`, applied to :func:`chunk_bytes`.
A stream that does not unpickle raises :class:`DecodeError` naming the
sequence number; the caller has already consumed the message.
"""

from __future__ import annotations

import pickle
import pickletools
import struct
from typing import Any

from ..errors import DecodeError
from .serialization import Pickled

INLINE = 0
OVERFLOW = 1
READY = 2
SHUTDOWN = 3
INLINE_LENT = 4
RUN_FIRST = 5
RUN_MORE = 6
RUN_LAST = 7
RUN_ABORT = 8
KIND_NAMES = {
    INLINE: "INLINE", OVERFLOW: "OVERFLOW", READY: "READY", SHUTDOWN: "SHUTDOWN",
    INLINE_LENT: "INLINE_LENT", RUN_FIRST: "RUN_FIRST", RUN_MORE: "RUN_MORE",
    RUN_LAST: "RUN_LAST", RUN_ABORT: "RUN_ABORT",
}
#: What a ring chunk may hold where a message starts.
CHUNK_KINDS = frozenset((INLINE, INLINE_LENT, OVERFLOW, RUN_FIRST))
#: What may follow a run's chunk.
RUN_NEXT_KINDS = frozenset((RUN_MORE, RUN_LAST, RUN_ABORT))
#: READY and SHUTDOWN: control messages that may share a pipe with the window.
CONTROL_MESSAGES = 2

HEADER = struct.Struct("<BQQI")
LENGTH = struct.Struct("<Q")
HEADER_BYTES = HEADER.size
_LEN = LENGTH.size


def kind_name(kind: int) -> str:
    return KIND_NAMES.get(kind, f"unknown kind {kind}")


def chunk_bytes(p: Pickled) -> int:
    """Bytes an INLINE chunk needs for ``p``: header, lengths, stream, buffers."""
    stream, bufs, _ = p
    size = HEADER_BYTES + len(stream)
    for b in bufs:
        size += _LEN + b.nbytes
    return size


def control_header(kind: int, seq: int) -> bytes:
    return HEADER.pack(kind, seq, 0, 0)


# --- ring chunks -------------------------------------------------------------


def write_inline(chunk: memoryview, seq: int, p: Pickled) -> None:
    """Store ``p`` whole in ``chunk`` (the caller checked that it fits)."""
    stream, bufs, lend = p
    nbytes = len(stream)
    if not bufs:
        HEADER.pack_into(chunk, 0, INLINE, seq, nbytes, 0)
        chunk[HEADER_BYTES : HEADER_BYTES + nbytes] = stream
        return
    HEADER.pack_into(chunk, 0, INLINE_LENT if lend else INLINE, seq, nbytes, len(bufs))
    off = HEADER_BYTES
    for b in bufs:
        LENGTH.pack_into(chunk, off, b.nbytes)
        off += _LEN
    chunk[off : off + nbytes] = stream
    off += nbytes
    for b in bufs:
        chunk[off : off + b.nbytes] = b
        off += b.nbytes


def write_marker(chunk: memoryview, seq: int, p: Pickled) -> None:
    """Store the overflow marker of ``p`` in ``chunk``: its frame follows on the socket."""
    HEADER.pack_into(chunk, 0, OVERFLOW, seq, len(p[0]), len(p[1]))


def read_header(buf: Any) -> tuple[int, int, int, int]:
    """``(kind, seq, nstream, nbuf)`` of a chunk or a frame's first part."""
    header: tuple[int, int, int, int] = HEADER.unpack_from(buf)
    return header


def load_inline(chunk: memoryview, header: tuple[int, int, int, int]) -> Any:
    """The object an INLINE / INLINE_LENT chunk holds, owning its memory (the chunk is
    reused once released). Raises :class:`DecodeError`."""
    kind, seq, nbytes, nbuf = header
    if not nbuf:
        with chunk[HEADER_BYTES : HEADER_BYTES + nbytes] as stream:
            try:
                return pickle.loads(stream)
            except Exception as exc:
                raise DecodeError(seq, exc, _first_class(stream)) from exc
    off = HEADER_BYTES + _LEN * nbuf
    start = off + nbytes
    views = []
    for i in range(nbuf):
        n = LENGTH.unpack_from(chunk, HEADER_BYTES + _LEN * i)[0]
        views.append(chunk[start : start + n])
        start += n
    try:
        buffers = views if kind == INLINE_LENT else [bytearray(v) for v in views]
        with chunk[off : off + nbytes] as stream:
            return _loads(seq, stream, buffers)
    finally:
        for v in views:
            v.release()


# --- socket frames -------------------------------------------------------------


def frame_parts(seq: int, p: Pickled) -> list[Any]:
    """The frame of ``p``: ``[header, stream, *buffers]``, the buffers as the views
    ``p`` holds. Each socket copies them as it sends (:func:`.sockets.send_frames`),
    so a caller that changes its object once ``enqueue`` returns (read-only views of
    memory it owns included) cannot change what a socket sends later."""
    stream, bufs, _ = p
    parts: list[Any] = [HEADER.pack(OVERFLOW, seq, len(stream), len(bufs)), stream]
    parts.extend(bufs)
    return parts


def load_frame(seq: int, parts: list[Any]) -> Any:
    """The object of a frame's ``[header, stream, *buffers]`` buffers. Raises
    :class:`DecodeError`."""
    return _loads(seq, parts[1], parts[2:])


def _loads(seq: int, stream: Any, buffers: Any) -> Any:
    try:
        return pickle.loads(stream, buffers=buffers)
    except Exception as exc:
        raise DecodeError(seq, exc, _first_class(stream)) from exc


def _first_class(stream: Any) -> str | None:
    """The first class a pickle stream names, when it can be read (for error messages)."""
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(bytes(stream)):
            if op.name == "GLOBAL" and isinstance(arg, str):
                return arg.replace(" ", ".")
            if op.name == "STACK_GLOBAL" and len(strings) >= 2:
                return f"{strings[-2]}.{strings[-1]}"
            if isinstance(arg, str):
                strings.append(arg)
    except Exception:
        pass
    return None
