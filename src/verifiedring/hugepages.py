"""Transparent huge pages for large receive buffers (Linux; best effort).

A reader rebuilding a 64 MiB object first touches 16,384 fresh 4 KiB pages of the
object's new buffer, and those page faults (each zeroes its page) cost more than the
copy out of the ring. Where transparent huge pages are enabled for ``madvise`` (the
common kernel default), :func:`advise_huge_pages` asks for 2 MiB pages over the
buffer before it is filled: 32 faults instead. ``make bench``'s large-object rows (64 MiB
to 3 readers through runs) measure the path it speeds up; their figures are in
``bench/results``. Nothing else changes: the pages stay the buffer's own, only their
size does.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections.abc import Callable

HUGE_PAGE = 2 * 1024 * 1024
#: Buffers smaller than this are left alone (at most one huge page would fit inside).
MIN_BYTES = 2 * HUGE_PAGE
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)


def _madvise() -> Callable[[int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        func = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    func.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    func.restype = ctypes.c_int
    made: Callable[[int, int, int], int] = func
    return made


_MADVISE = _madvise()


def advise_huge_pages(buf: memoryview) -> int:
    """Ask for huge pages over the whole 2 MiB pages inside writable ``buf`` (before it
    is first written); the bytes advised (0: too small, not Linux, or refused)."""
    n = buf.nbytes
    if _MADVISE is None or n < MIN_BYTES or buf.readonly:
        return 0
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    start = (addr + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1)
    end = (addr + n) & ~(HUGE_PAGE - 1)
    if end <= start or _MADVISE(start, end - start, _MADV_HUGEPAGE) != 0:
        return 0
    return end - start
