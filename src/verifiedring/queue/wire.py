"""The message queue's wire format, the one descriptor: every byte a queue end sends.

Every message starts with one header (:data:`HEADER`, little endian)::

    kind     u8    INLINE (0) | OVERFLOW (1) | READY (2) | SHUTDOWN (3) | INLINE_LENT (4)
                   | RUN_FIRST (5) | RUN_MORE (6) | RUN_LAST (7) | RUN_ABORT (8) | RAW (9)
                   | BROKEN (10) | LATE (11)
    seq      u64   the message's sequence number (SHUTDOWN, BROKEN: messages sent in all)
    nstream  u64   bytes of the pickle stream (a run chunk: its bytes of the run)
    nbuf     u32   number of out-of-band buffers (a run chunk: its part, 0, 1, ...)

followed, for INLINE, INLINE_LENT and OVERFLOW, by ``nbuf`` u64 buffer lengths
(:data:`LENGTH`).

* **Ring chunk, INLINE**: header, lengths, stream, buffers -- all in the chunk.
  INLINE_LENT is the same for an object whose reconstruction copies its
  buffers anyway (a top-level ``bytes``/``bytearray``): the reader lends the
  unpickler views of the chunk instead of copying them out first.
* **Ring chunk, RAW** (``acquire_write``): header (``nstream``: the payload's
  bytes, the chunk's rest; ``nbuf`` 0), then bytes the caller wrote in place, no
  pickle: a reader's ``dequeue`` returns them as ``bytes`` (:func:`stamp_raw`).
* **Ring chunk, OVERFLOW** (the overflow marker): the header only; the object
  travels on the local socket as the frame with the same ``seq``.
* **Run** (``large_objects="stream"``, :mod:`.flavors.run`): a message too large
  for one chunk, as chunks RUN_FIRST (part 0), RUN_MORE (1, 2, ...), then
  RUN_LAST or RUN_ABORT, all with its ``seq``; the header's ``nstream`` is the
  chunk's bytes of the run (:func:`write_run_header`). Their bytes, in order, are
  one byte string: ``u64 nbuf``, ``nbuf`` u64 lengths (:func:`buffer_table`), the
  buffers, the pickle stream. RUN_ABORT's bytes are the writer's reason, UTF-8
  (:func:`write_abort`).
* **Frame** (the local socket and the remote one, which CURVE authenticates):
  ``[header, stream, *buffers]`` with ``kind == OVERFLOW``; a run aborted
  mid-message reaches remote readers as ``[RUN_ABORT header, reason]``
  (:func:`abort_frame`).
* **Control frame**: ``[header]`` with ``kind`` READY or SHUTDOWN; ``[header,
  reason]`` with ``kind`` BROKEN (the writer broke: the reason, UTF-8,
  :func:`broken_frame`); ``[header]`` with ``kind`` LATE: what a reader that
  connects after READY gets first (ZeroMQ's welcome message, :func:`late_frame`).
* **Acknowledgement** (remote reader to writer): :data:`ACK`, ``u32 rank, u64
  received count`` (:func:`ack_message`, :func:`read_ack`).
* **Hello body** (a reader's subscription topic, tagged by :mod:`.sockets`):
  :data:`HELLO_PREFIX`, ``u32 rank, u32 pid``, the host name (:func:`hello_body`).

Whether an object fits in a chunk is one rule: :meth:`RingLayout.fits
<verifiedring.layout.RingLayout.fits>` applied to :func:`chunk_bytes`, whose parts
(:data:`HEADER_BYTES`, :func:`buffer_bytes`) the streaming pickler's file sums as
it goes. A stream that does not unpickle raises :class:`DecodeError` naming the
sequence number; the caller has already consumed the message.
"""

from __future__ import annotations

import pickle
import pickletools
import struct
from typing import Any

from ..errors import DecodeError, MisuseError

INLINE = 0
OVERFLOW = 1
READY = 2
SHUTDOWN = 3
INLINE_LENT = 4
RUN_FIRST = 5
RUN_MORE = 6
RUN_LAST = 7
RUN_ABORT = 8
RAW = 9
BROKEN = 10
LATE = 11
KIND_NAMES = {
    INLINE: "INLINE", OVERFLOW: "OVERFLOW", READY: "READY", SHUTDOWN: "SHUTDOWN",
    INLINE_LENT: "INLINE_LENT", RUN_FIRST: "RUN_FIRST", RUN_MORE: "RUN_MORE",
    RUN_LAST: "RUN_LAST", RUN_ABORT: "RUN_ABORT", RAW: "RAW", BROKEN: "BROKEN",
    LATE: "LATE",
}
#: What a ring chunk may hold where a message starts.
CHUNK_KINDS = frozenset((INLINE, INLINE_LENT, OVERFLOW, RUN_FIRST, RAW))
#: What may follow a run's chunk.
RUN_NEXT_KINDS = frozenset((RUN_MORE, RUN_LAST, RUN_ABORT))
#: READY, then SHUTDOWN or BROKEN: control messages that may share a pipe with the window.
CONTROL_MESSAGES = 2

HEADER = struct.Struct("<BQQI")
LENGTH = struct.Struct("<Q")
HEADER_BYTES = HEADER.size
_unpack_header = HEADER.unpack_from  # bound once: decode_chunk is on the hot path
_LEN = LENGTH.size
ACK = struct.Struct("<IQ")  # rank, received count
HELLO_PREFIX = b"\xffvr-hello"
_HELLO = struct.Struct("<II")  # rank, pid; then the host name
#: Ranks are u32 on the wire; the last value stands for a remote reader without a rank
#: (vLLM's ``create_from_handle(handle, -1)``).
MAX_RANK = 2**32 - 1

#: The default ring geometry, as vLLM 0.33's ``MessageQueue``: 10 chunks of 24 MiB. A
#: chunk holds an INLINE message of up to ``max_chunk_bytes`` (:func:`chunk_bytes`),
#: the 21-byte header included; the writer's pages are reserved only as its writes
#: reach them (:mod:`verifiedring.reservation`).
DEFAULT_MAX_CHUNK_BYTES = 24 * 1024 * 1024
DEFAULT_MAX_CHUNKS = 10

#: One serialized object, what the writer stores or sends: ``(stream, buffers, lend)``.
#: A plain tuple: it is made once per message on the hot path.
Pickled = tuple[bytes, list[memoryview], bool]


def kind_name(kind: int) -> str:
    return KIND_NAMES.get(kind, f"unknown kind {kind}")


def check_chunk_bytes(max_chunk_bytes: int) -> None:
    """Refuse a chunk size that cannot hold a message: the header plus one byte."""
    if max_chunk_bytes < HEADER_BYTES + 1:
        raise MisuseError(
            f"max_chunk_bytes={max_chunk_bytes} cannot hold a message: a chunk needs the "
            f"{HEADER_BYTES}-byte header plus at least 1 byte"
        )


def buffer_bytes(nbytes: int) -> int:
    """Bytes one out-of-band buffer of ``nbytes`` adds to an INLINE chunk."""
    return _LEN + nbytes


def chunk_bytes(p: Pickled) -> int:
    """Bytes an INLINE chunk needs for ``p``: header, lengths, stream, buffers."""
    stream, bufs, _ = p
    size = HEADER_BYTES + len(stream)
    for b in bufs:
        size += buffer_bytes(b.nbytes)
    return size


def control_header(kind: int, seq: int) -> bytes:
    return HEADER.pack(kind, seq, 0, 0)


def read_header(buf: Any) -> tuple[int, int, int, int]:
    """``(kind, seq, nstream, nbuf)`` of a chunk or a frame's first part."""
    header: tuple[int, int, int, int] = HEADER.unpack_from(buf)
    return header


# --- ring chunks -------------------------------------------------------------


def encode_chunk(chunk: memoryview, seq: int, p: Pickled, inline: bool) -> None:
    """Store message ``seq`` in ``chunk``: ``p`` whole if ``inline`` (the caller
    applied the fit rule), else its overflow marker (the frame follows on the socket)."""
    stream, bufs, lend = p
    nbytes = len(stream)
    if not inline:
        HEADER.pack_into(chunk, 0, OVERFLOW, seq, nbytes, len(bufs))
        return
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


def stamp_raw(chunk: memoryview, seq: int) -> None:
    """Make ``chunk``, its payload written in place after the header, message ``seq``
    (RAW: the whole rest of the chunk is the message's bytes)."""
    HEADER.pack_into(chunk, 0, RAW, seq, len(chunk) - HEADER_BYTES, 0)


def stored_bytes(chunk: memoryview, header: tuple[int, int, int, int]) -> int:
    """Bytes from the start of an INLINE / INLINE_LENT / RAW ``chunk`` its writer stored."""
    _, _, nbytes, nbuf = header
    lengths: list[int] = [
        LENGTH.unpack_from(chunk, HEADER_BYTES + _LEN * i)[0] for i in range(nbuf)
    ]
    return HEADER_BYTES + _LEN * nbuf + nbytes + sum(lengths)


def decode_chunk(chunk: memoryview, expect: int) -> tuple[int, int, int, int] | None:
    """The header of a chunk that starts message ``expect`` (a kind of
    :data:`CHUNK_KINDS`), else ``None`` (a message lost or reordered)."""
    header: tuple[int, int, int, int] = _unpack_header(chunk)
    if header[1] != expect or header[0] not in CHUNK_KINDS:
        return None
    return header


def load_inline(chunk: memoryview, header: tuple[int, int, int, int]) -> Any:
    """The object an INLINE / INLINE_LENT chunk holds (a RAW one: its bytes), owning
    its memory (the chunk is reused once released). Raises :class:`DecodeError`."""
    kind, seq, nbytes, nbuf = header
    if not nbuf:
        if kind == RAW:
            return bytes(chunk[HEADER_BYTES : HEADER_BYTES + nbytes])
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


# --- run chunks ----------------------------------------------------------------


def write_run_header(chunk: memoryview, kind: int, seq: int, nbytes: int, part: int) -> None:
    """The header of run chunk ``part`` of message ``seq``, holding ``nbytes`` of the run."""
    HEADER.pack_into(chunk, 0, kind, seq, nbytes, part)


def write_abort(chunk: memoryview, seq: int, part: int, reason: str) -> None:
    """RUN_ABORT as part ``part`` of message ``seq``'s run: ``reason``, cut to the chunk."""
    text = reason.encode("utf-8", "replace")[: len(chunk) - HEADER_BYTES]
    chunk[HEADER_BYTES : HEADER_BYTES + len(text)] = text
    HEADER.pack_into(chunk, 0, RUN_ABORT, seq, len(text), part)


def buffer_table(buffers: list[memoryview]) -> bytearray:
    """The head of a run's bytes: ``u64 nbuf`` then each buffer's length."""
    head = bytearray(_LEN * (1 + len(buffers)))
    LENGTH.pack_into(head, 0, len(buffers))
    for i, b in enumerate(buffers):
        LENGTH.pack_into(head, _LEN * (i + 1), b.nbytes)
    return head


def buffer_lengths(table: bytes, nbuf: int) -> list[int]:
    """The ``nbuf`` lengths of a run's buffer table (after its ``u64 nbuf``)."""
    return [LENGTH.unpack_from(table, _LEN * i)[0] for i in range(nbuf)]


def read_length(data: bytes) -> int:
    """One u64 length (a run's ``nbuf``)."""
    (n,) = LENGTH.unpack(data)
    return int(n)


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


def abort_frame(seq: int, reason: str) -> list[bytes]:
    """What remote readers get where the frame of a message aborted mid-run would be."""
    return [HEADER.pack(RUN_ABORT, seq, 0, 0), reason.encode("utf-8", "replace")]


def late_frame() -> bytes:
    """LATE: the writer's handshake is over; the reader that gets it joined too late."""
    return HEADER.pack(LATE, 0, 0, 0)


def broken_frame(total: int, reason: str) -> list[bytes]:
    """BROKEN: the writer broke for good after ``total`` messages, for ``reason``."""
    return [HEADER.pack(BROKEN, total, 0, 0), reason.encode("utf-8", "replace")]


def abort_reason(part: Any) -> str:
    """The reason an ABORT frame's (or chunk's) or a BROKEN frame's bytes carry."""
    return bytes(part).decode("utf-8", "replace")


# --- acknowledgements and hellos ------------------------------------------------


def ack_message(rank: int, count: int) -> bytes:
    """What a reader sends (over CURVE) to acknowledge ``count`` received messages."""
    return ACK.pack(MAX_RANK if rank < 0 else rank, count)


def read_ack(body: bytes) -> tuple[int, int]:
    """``(rank, count)`` of an acknowledgement; rank -1 when malformed."""
    if len(body) != ACK.size:
        return -1, 0
    rank, count = ACK.unpack(body)
    return int(rank), int(count)


def hello_body(rank: int, pid: int, host: bytes) -> bytes:
    """The untagged hello of reader ``rank`` (-1: without a rank)."""
    return HELLO_PREFIX + _HELLO.pack(MAX_RANK if rank < 0 else rank, pid) + host[:64]


def read_hello(body: bytes) -> tuple[int, int, str] | None:
    """``(rank, pid, host)`` of an untagged hello body, else ``None``."""
    n = len(HELLO_PREFIX) + _HELLO.size
    if len(body) < n or not body.startswith(HELLO_PREFIX):
        return None
    rank, pid = _HELLO.unpack_from(body, len(HELLO_PREFIX))
    return rank, pid, body[n:].decode(errors="replace")


# --- decoding ------------------------------------------------------------------


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
