"""The room policy of a ring's segment, and the writer's lazy page reservation.

Two policies (:data:`RESERVE_POLICIES`), chosen per ring (``reserve=``) or for
every ring of a process by ``$VERIFIEDRING_SHM_RESERVE`` (:func:`reserve_policy`):

* ``"pages"`` (the default): a create reserves what every ring touches -- the
  sleep area, the flag area and the page holding the start of each chunk's data
  (:func:`committed_at_create`), so a small message (to the end of that page, less
  the header) needs nothing reserved later -- and its room check asks for
  that plus one whole chunk (:func:`room_at_create`): a ``/dev/shm`` that cannot
  take one message as large as a chunk refuses the ring at create. The rest is
  reserved as the writer's bytes reach it.
* ``"all"``: a create reserves the whole segment, and its room check asks for
  all of it; nothing is reserved later.

The writer keeps, in its own memory, a high-water mark per chunk: how many bytes
from the chunk's start are backed by pages. Before a write that stores past the
mark, :meth:`PageReserver.reserve` backs the new range (``posix_fallocate``),
growing the mark at least twofold (at most to the whole chunk), so a stream of
growing messages costs few calls.

Guarantees: no store reaches a page that is not backed (so no SIGBUS), as long
as the writer stores only within the bytes it reserved; a reservation that
finds no room raises :class:`~verifiedring.errors.SharedMemoryFullError` before
the write's claim, so no flag or payload byte is stored and the ring stays
usable. Readers load only bytes the writer stored, so they never reserve.
"""

from __future__ import annotations

import mmap
import os

from .errors import MisuseError
from .layout import RingLayout
from .shm import SharedSegment

PAGE = mmap.PAGESIZE
#: The room policies: reserve pages as the writer reaches them, or all at create.
RESERVE_POLICIES = ("pages", "all")
#: The environment variable that sets the policy of rings built without ``reserve=``.
RESERVE_ENV = "VERIFIEDRING_SHM_RESERVE"
__all__ = [
    "PAGE", "RESERVE_ENV", "RESERVE_POLICIES", "PageReserver", "committed_at_create",
    "reserve_policy", "room_at_create",
]


def reserve_policy(reserve: str | None) -> str:
    """``reserve``, else ``$VERIFIEDRING_SHM_RESERVE``, else ``"pages"``; anything
    but a name of :data:`RESERVE_POLICIES` is a :class:`MisuseError` naming it."""
    if reserve is None:
        reserve = os.environ.get(RESERVE_ENV) or RESERVE_POLICIES[0]
        where = f"{RESERVE_ENV}={reserve!r}"
    else:
        where = f"reserve={reserve!r}"
    if not isinstance(reserve, str) or reserve not in RESERVE_POLICIES:
        raise MisuseError(f"{where}: the room policy is one of {', '.join(RESERVE_POLICIES)}")
    return reserve


def _down(offset: int) -> int:
    return offset - offset % PAGE


def _up(offset: int) -> int:
    return -(-offset // PAGE) * PAGE


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(start, end)`` ranges sorted, overlapping or touching ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _first_page_end(layout: RingLayout, chunk: int) -> int:
    """End of the page that holds ``chunk``'s first data byte (within the segment)."""
    return min(layout.total_bytes, _up(layout.data_offset(chunk) + 1))


def committed_at_create(layout: RingLayout, reserve: str) -> list[tuple[int, int]]:
    """``(offset, length)`` ranges a new ring's segment backs at create: ``"all"``,
    the whole segment; ``"pages"``, the sleep area, the first page of each chunk's
    data and the flag area, whole pages."""
    total = layout.total_bytes
    if reserve == "all":
        return [(0, total)]
    ranges = [(0, _up(layout.data_base)), (_down(layout.flags_base), total)]
    for c in range(layout.max_chunks):
        ranges.append((_down(layout.data_offset(c)), _first_page_end(layout, c)))
    return [(s, min(e, total) - s) for s, e in _merged(ranges)]


def room_at_create(layout: RingLayout, reserve: str) -> int:
    """Bytes a create's room check asks for: ``"all"``, the segment; ``"pages"``,
    what it reserves plus one whole chunk (room for a message as large as a chunk)."""
    if reserve == "all":
        return layout.total_bytes
    held = sum(n for _, n in committed_at_create(layout, reserve))
    return min(layout.total_bytes, held + layout.max_chunk_bytes)


class PageReserver:
    """The writer's per-chunk high-water marks over ``segment``'s data area.

    Invariant: the first ``marks[c]`` bytes of chunk ``c`` are backed by pages
    (``0 < marks[c] <= max_chunk_bytes``); a mark only grows.
    """

    def __init__(self, segment: SharedSegment, layout: RingLayout, reserve: str) -> None:
        self._segment = segment
        self._chunk_bytes = layout.max_chunk_bytes
        self._total = layout.total_bytes
        self._starts = [layout.data_offset(c) for c in range(layout.max_chunks)]
        #: Bytes from each chunk's start known to be backed (the writer's own memory).
        self.marks = [
            self._chunk_bytes if reserve == "all"
            else min(self._chunk_bytes, _first_page_end(layout, c) - start)
            for c, start in enumerate(self._starts)
        ]

    def reserve(self, chunk: int, nbytes: int) -> None:
        """Back at least the first ``nbytes`` (``<= max_chunk_bytes``) of ``chunk``.
        :class:`SharedMemoryFullError` (naming the chunk and the bytes) if there is
        no room: the mark is unchanged, nothing was stored."""
        mark = self.marks[chunk]
        if nbytes <= mark:
            return
        size = self._chunk_bytes
        start = self._starts[chunk]
        target = min(size, max(nbytes, 2 * mark))
        lo = _down(start + mark)
        hi = min(self._total, _up(start + target))
        self._segment.reserve(
            lo, hi - lo,
            f"chunk {chunk}: a write of {nbytes} bytes from its start (of its {size}; "
            f"{mark} reserved)",
        )
        self.marks[chunk] = min(size, hi - start)
