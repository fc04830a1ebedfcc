"""The byte layout of a ring segment. No other module computes an offset.

::

    offset 0
    +-----------+-----------+-----+---------------+   data area:
    | chunk 0   | chunk 1   | ... | chunk K-1     |   K * max_chunk_bytes
    +-----------+-----------+-----+---------------+
    flags_base = K * max_chunk_bytes
    +---+----+----+-----+------+---+----+-----+------+
    | w | r0 | r1 | ... | rN-1 | w | r0 | ... | rN-1 | ...  flag area:
    +---+----+----+-----+------+---+----+-----+------+      K * (1 + N)
    \\------ chunk 0 flags -----/ \\-- chunk 1 flags -/

    K = max_chunks, N = n_reader
    total = (max_chunk_bytes + 1 + N) * K

Encoding of every flag byte (one byte each, so a store never tears):

* ``w`` (written): 1 -- the chunk holds a published message; 0 -- it does not
  (initial, or the writer is refilling it). Stored only by the writer.
* ``r<k>`` (read by local reader k): 1 -- reader k has consumed the chunk's
  current message; 0 -- it has not (initial, or cleared by the writer just
  before publishing). Stored by the writer (clear) and by reader k (set);
  never by another reader. ``k`` is the reader's position among the local
  readers, not its global rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import MisuseError

WRITTEN_FLAG_SIZE = 1
#: Index of ``written`` within a chunk's flag block.
WRITTEN_POSITION = 0


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
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MisuseError(f"ring geometry: {field} must be an int >= 1, got {value!r}")

    @property
    def flags_per_chunk(self) -> int:
        """Flag bytes of one chunk: ``written`` then one per reader."""
        return WRITTEN_FLAG_SIZE + self.n_reader

    @property
    def flags_base(self) -> int:
        """Offset of the flag area (right after the data area)."""
        return self.max_chunks * self.max_chunk_bytes

    @property
    def total_bytes(self) -> int:
        """Size of the whole segment: ``(max_chunk_bytes + 1 + n_reader) * max_chunks``."""
        return (self.max_chunk_bytes + self.flags_per_chunk) * self.max_chunks

    def data_offset(self, chunk: int) -> int:
        """Offset of the first data byte of ``chunk``."""
        self.check_chunk(chunk)
        return chunk * self.max_chunk_bytes

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
