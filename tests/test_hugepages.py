"""advise_huge_pages: whole 2 MiB pages inside a writable buffer, nothing else."""

from __future__ import annotations

import sys

import pytest

from verifiedring.hugepages import HUGE_PAGE, MIN_BYTES, advise_huge_pages

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise is Linux's")


@linux
def test_a_large_buffer_is_advised_over_its_whole_huge_pages_only() -> None:
    buf = bytearray(16 * 1024 * 1024 + 12345)
    advised = advise_huge_pages(memoryview(buf))
    assert advised % HUGE_PAGE == 0
    assert len(buf) - 2 * HUGE_PAGE <= advised <= len(buf)
    buf[:] = bytes(range(256)) * (len(buf) // 256) + bytes(len(buf) % 256)  # still its own
    assert buf[255] == 255 and buf[-1] == 0


def test_small_or_read_only_buffers_are_left_alone() -> None:
    assert advise_huge_pages(memoryview(bytearray(MIN_BYTES - 1))) == 0
    assert advise_huge_pages(memoryview(bytes(MIN_BYTES * 2))) == 0
