"""The byte layouts of a ring segment (:class:`RingLayout`) and of a tensor arena
segment (:class:`ArenaLayout`). No other module computes an offset.

Ring segment
------------

::

    offset 0
    +------+------+-----+--------+-------+---------+   sleep area: one 32-bit word
    | s0   | s1   | ... | sN-1   | ended | padding |   per reader and the ended word,
    +------+------+-----+--------+-------+---------+   in cache lines of their own
                                                       S = 4 * (N + 1) rounded up to 64
    data_base = S
    +-----------+-----------+-----+---------------+   data area:
    | chunk 0   | chunk 1   | ... | chunk K-1     |   K * max_chunk_bytes
    +-----------+-----------+-----+---------------+
    flags_base = S + K * max_chunk_bytes
    +---+----+----+-----+------+---+----+-----+------+
    | w | r0 | r1 | ... | rN-1 | w | r0 | ... | rN-1 | ...  flag area:
    +---+----+----+-----+------+---+----+-----+------+      K * (1 + N)
    \\------ chunk 0 flags -----/ \\-- chunk 1 flags -/

    K = max_chunks, N = n_reader
    total = S + (max_chunk_bytes + 1 + N) * K

The sleep area comes first so that a larger geometry always needs a larger
segment (attaching with a handle that does not match fails), and the data area
starts on a cache line.

Encoding of every flag byte (one byte each, so a store never tears):

* ``w`` (written): 1 -- the chunk holds a published message; 0 -- it does not
  (initial, or the writer is refilling it). Stored only by the writer.
* ``r<k>`` (read by local reader k): 1 -- reader k has consumed the chunk's
  current message; 0 -- it has not (initial, or cleared by the writer just
  before publishing). Stored by the writer (clear) and by reader k (set);
  never by another reader. ``k`` is the reader's position among the local
  readers, not its global rank.

Encoding of every sleep word (32 bits, native byte order, 4-byte aligned, so a
store never tears and the kernel's futex can wait on it):

* ``s<k>`` (reader k asleep): 1 -- reader k has announced that it is about to
  block, or is blocked, in a futex wait on this word; 0 -- it is not (initial,
  after it woke, or cleared by the writer just before waking it). Stored by
  reader k (1 and 0; 0 also from another thread of its process, its
  ``shutdown()``, just before waking it) and by the writer (0 only).
* ``ended`` (the writer has ended): 1 -- the writer has sent its last frame
  (SHUTDOWN or BROKEN) to the local readers' socket and publishes nothing more, so a
  reader that finds nothing on the ring waits on its socket for that frame, not on its
  sleep word; 0 -- not yet (initial). Stored only by the writer (0 -> 1, once), before
  it wakes every reader (``spec/sleep/ReaderWake.tla``).

Arena segment (:mod:`verifiedring.arena`, model ``spec/arena/TensorArena.tla``)
---------------------------------------------------------------------------
::

    offset 0
    +-----+-----+----+----+-----+------+-----+-----+----+-----+------+ ...   metadata:
    | seq | gen | o0 | o1 | ... | oN-1 | seq | gen | o0 | ... | oN-1 |       M = 16 + N
    +-----+-----+----+----+-----+------+-----+-----+----+-----+------+       per slot
    \\--------- slot 0 (M bytes) ------/ \\------- slot 1 -----------/
    data_base = n_slots * M rounded up to 4096
    +-------------+-------------+-----+---------------+   data area: each slot
    | slot 0      | slot 1      | ... | slot K-1      |   slot_stride = slot_bytes
    +-------------+-------------+-----+---------------+   rounded up to 64

    K = n_slots, N = n_reader (the queue's local readers)
    total = data_base + K * slot_stride

Encoding, and who stores each field:

* ``seq`` (u64, little-endian): the sequence number of the message whose tensor
  the slot holds. Stored only by the writer, at a claim, before the owes bytes.
* ``gen`` (u64, little-endian): the claim's number (1, 2, ...; 0: never claimed);
  a stub carries it. Stored only by the writer, with seq.
* ``o<k>`` (owes, one byte): 1 -- local reader k may still view the slot; 0 -- it
  has released it (initial, a view's last storage freed, or a sweep). Stored by
  the writer (1, at a claim) and by reader k (0); never by another reader.
* the slot's data bytes: the tensor, copied in once by the writer after its claim;
  only loaded by the readers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import MisuseError, require_int

WRITTEN_FLAG_SIZE = 1
#: Index of ``written`` within a chunk's flag block.
WRITTEN_POSITION = 0
SLEEP_WORD_SIZE = 4
#: The sleep area fills whole cache lines.
CACHE_LINE = 64


#: The most chunks a ring has: a ring of this many is built in well under a second;
#: vLLM's rings have 10.
MAX_CHUNKS = 2**16


@dataclass(frozen=True)
class RingLayout:
    """Geometry of a ring and the offsets of its chunks and flags.

    Invariant (checked at construction): every field is a positive int.
    """

    n_reader: int
    max_chunk_bytes: int
    max_chunks: int

    def __post_init__(self) -> None:
        for field in ("n_reader", "max_chunk_bytes", "max_chunks"):
            require_int(f"ring geometry: {field}", getattr(self, field))
        if self.max_chunks > MAX_CHUNKS:
            raise MisuseError(
                f"ring geometry: max_chunks must be at most {MAX_CHUNKS} (each chunk costs "
                f"views and a flag row in every process), got {self.max_chunks!r}"
            )

    @property
    def flags_per_chunk(self) -> int:
        """Flag bytes of one chunk: ``written`` then one per reader."""
        return WRITTEN_FLAG_SIZE + self.n_reader

    @property
    def sleep_bytes(self) -> int:
        """Size of the sleep area at offset 0: the sleep words and the ended word,
        padded to whole cache lines."""
        return -(-SLEEP_WORD_SIZE * (self.n_reader + 1) // CACHE_LINE) * CACHE_LINE

    @property
    def ended_offset(self) -> int:
        """Offset of the ended word (right after the last reader's sleep word)."""
        return SLEEP_WORD_SIZE * self.n_reader

    @property
    def data_base(self) -> int:
        """Offset of the data area (right after the sleep area)."""
        return self.sleep_bytes

    @property
    def flags_base(self) -> int:
        """Offset of the flag area (right after the data area)."""
        return self.data_base + self.max_chunks * self.max_chunk_bytes

    @property
    def total_bytes(self) -> int:
        """Size of the whole segment:
        ``sleep_bytes + (max_chunk_bytes + 1 + n_reader) * max_chunks``."""
        return self.sleep_bytes + (self.max_chunk_bytes + self.flags_per_chunk) * self.max_chunks

    def sleep_offset(self, reader: int) -> int:
        """Offset of local reader ``reader``'s sleep word."""
        self.check_reader(reader)
        return SLEEP_WORD_SIZE * reader

    def data_offset(self, chunk: int) -> int:
        """Offset of the first data byte of ``chunk``."""
        self.check_chunk(chunk)
        return self.data_base + chunk * self.max_chunk_bytes

    def flags_offset(self, chunk: int) -> int:
        """Offset of ``chunk``'s flag block (its ``written`` byte)."""
        self.check_chunk(chunk)
        return self.flags_base + chunk * self.flags_per_chunk

    written_offset = flags_offset

    def read_flag_position(self, reader: int) -> int:
        """Index of local reader ``reader``'s read flag within a chunk's flag block."""
        self.check_reader(reader)
        return WRITTEN_FLAG_SIZE + reader

    def read_flag_offset(self, chunk: int, reader: int) -> int:
        """Offset of local reader ``reader``'s read flag for ``chunk``."""
        return self.flags_offset(chunk) + self.read_flag_position(reader)

    def check_chunk(self, chunk: int) -> None:
        """Raise :class:`MisuseError` unless ``0 <= chunk < max_chunks``."""
        if not 0 <= chunk < self.max_chunks:
            raise MisuseError(f"chunk index {chunk} out of range 0..{self.max_chunks - 1}")

    def check_reader(self, reader: int) -> None:
        """Raise :class:`MisuseError` unless ``reader`` is a local reader index."""
        valid = isinstance(reader, int) and not isinstance(reader, bool)
        if not valid or not 0 <= reader < self.n_reader:
            raise MisuseError(
                f"reader index {reader!r} out of range 0..{self.n_reader - 1}: a reader's flag "
                "index is its position among the local readers, not its global rank"
            )

    def fits(self, nbytes: int) -> bool:
        """The capacity rule: a message of ``nbytes`` fits in one chunk."""
        return nbytes <= self.max_chunk_bytes

    def check_fits(self, nbytes: int) -> None:
        """Raise :class:`MisuseError` unless :meth:`fits`."""
        if not self.fits(nbytes):
            raise MisuseError(
                f"message of {nbytes} bytes does not fit: a message must fit in one chunk of "
                f"max_chunk_bytes={self.max_chunk_bytes}"
            )


#: An arena slot's metadata head: ``seq``, ``gen`` (then one owes byte per reader).
ARENA_META = struct.Struct("<QQ")
#: The arena's data area starts on a page; each slot on a 64-byte line (any dtype).
ARENA_DATA_ALIGN = 4096
ARENA_SLOT_ALIGN = 64


@dataclass(frozen=True)
class ArenaLayout:
    """Geometry of a tensor arena and the offsets of its slots' metadata and data
    (the diagram above)."""

    n_reader: int
    n_slots: int
    slot_bytes: int

    @property
    def meta_bytes(self) -> int:
        """Metadata bytes of one slot: ``seq``, ``gen``, one owes byte per reader."""
        return ARENA_META.size + self.n_reader

    def meta_offset(self, slot: int) -> int:
        """Offset of ``slot``'s ``seq`` (its metadata block)."""
        return slot * self.meta_bytes

    def owes_offset(self, slot: int) -> int:
        """Offset of ``slot``'s owes byte of reader 0."""
        return self.meta_offset(slot) + ARENA_META.size

    @property
    def data_base(self) -> int:
        """Offset of the data area: after every slot's metadata, on a page."""
        return -(-self.n_slots * self.meta_bytes // ARENA_DATA_ALIGN) * ARENA_DATA_ALIGN

    @property
    def slot_stride(self) -> int:
        """Distance between two slots' data: ``slot_bytes`` rounded up to 64."""
        return -(-self.slot_bytes // ARENA_SLOT_ALIGN) * ARENA_SLOT_ALIGN

    def slot_offset(self, slot: int) -> int:
        """Offset of ``slot``'s first data byte."""
        return self.data_base + slot * self.slot_stride

    @property
    def total_bytes(self) -> int:
        """Size of the whole segment: ``data_base + n_slots * slot_stride``."""
        return self.data_base + self.n_slots * self.slot_stride
