"""The segment's byte layout: offsets, total size, capacity rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verifiedring import MisuseError, RingLayout, ShmRingBuffer
from verifiedring.layout import MAX_CHUNKS

geometry = st.tuples(
    st.integers(1, 8),  # n_reader
    st.integers(1, 64),  # max_chunk_bytes
    st.integers(1, 8),  # max_chunks
)


def test_offsets_of_a_small_ring() -> None:
    lay = RingLayout(n_reader=2, max_chunk_bytes=10, max_chunks=3)
    assert lay.flags_per_chunk == 3
    assert [lay.sleep_offset(r) for r in range(2)] == [0, 4]
    assert lay.ended_offset == 8
    assert lay.sleep_bytes == lay.data_base == 64
    assert [lay.data_offset(c) for c in range(3)] == [64, 74, 84]
    assert lay.flags_base == 94
    assert [lay.flags_offset(c) for c in range(3)] == [94, 97, 100]
    assert lay.written_offset(1) == 97
    assert [lay.read_flag_offset(2, r) for r in range(2)] == [101, 102]
    assert lay.total_bytes == 103


@given(geometry)
def test_total_size_formula(g: tuple[int, int, int]) -> None:
    n_reader, max_chunk_bytes, max_chunks = g
    lay = RingLayout(n_reader, max_chunk_bytes, max_chunks)
    sleep = -(-4 * (n_reader + 1) // 64) * 64  # the words and ended, in whole cache lines
    assert lay.total_bytes == sleep + (max_chunk_bytes + 1 + n_reader) * max_chunks


@given(geometry, geometry)
def test_a_larger_geometry_needs_a_larger_segment(
    g: tuple[int, int, int], h: tuple[int, int, int]
) -> None:
    """So attaching with a handle that does not match the segment fails."""
    small, big = RingLayout(*g), RingLayout(*h)
    if all(x <= y for x, y in zip(g, h, strict=True)) and g != h:
        assert big.total_bytes > small.total_bytes


@given(geometry)
def test_flags_come_after_all_data(g: tuple[int, int, int]) -> None:
    lay = RingLayout(*g)
    assert lay.data_offset(0) == lay.data_base == lay.sleep_bytes
    last_data_byte = lay.data_offset(lay.max_chunks - 1) + lay.max_chunk_bytes - 1
    assert lay.flags_base == last_data_byte + 1
    assert min(lay.flags_offset(c) for c in range(lay.max_chunks)) == lay.flags_base
    last_flag = lay.read_flag_offset(lay.max_chunks - 1, lay.n_reader - 1)
    assert last_flag == lay.total_bytes - 1


@given(geometry)
def test_every_byte_has_exactly_one_owner(g: tuple[int, int, int]) -> None:
    """All offsets are distinct, in range, 4-byte aligned for a sleep word, and
    together cover the segment (the sleep area's padding included)."""
    lay = RingLayout(*g)
    owners: list[tuple[str, int, int]] = []
    assert all(lay.sleep_offset(r) % 4 == 0 for r in range(lay.n_reader))
    for r in range(lay.n_reader):
        owners += [("sleep", r, lay.sleep_offset(r) + b) for b in range(4)]
    assert lay.ended_offset == 4 * lay.n_reader
    owners += [("ended", 0, lay.ended_offset + b) for b in range(4)]
    owners += [("padding", 0, b) for b in range(4 * (lay.n_reader + 1), lay.sleep_bytes)]
    for c in range(lay.max_chunks):
        owners += [("data", c, lay.data_offset(c) + b) for b in range(lay.max_chunk_bytes)]
        owners.append(("written", c, lay.written_offset(c)))
        owners += [("read", c, lay.read_flag_offset(c, r)) for r in range(lay.n_reader)]
    offsets = [off for _, _, off in owners]
    assert all(0 <= off < lay.total_bytes for off in offsets)
    assert len(set(offsets)) == len(offsets)
    assert sorted(offsets) == list(range(lay.total_bytes))


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("n_reader", {"n_reader": 0}),
        ("max_chunk_bytes", {"max_chunk_bytes": 0}),
        ("max_chunks", {"max_chunks": 0}),
        ("n_reader", {"n_reader": -1}),
        ("max_chunk_bytes", {"max_chunk_bytes": 2.0}),
        ("max_chunks", {"max_chunks": "3"}),
        ("n_reader", {"n_reader": True}),
    ],
)
def test_bad_geometry_names_the_field(field: str, kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"n_reader": 1, "max_chunk_bytes": 8, "max_chunks": 2, **kwargs}
    with pytest.raises(MisuseError, match=rf"{field} must be an int >= 1, got {kwargs[field]!r}"):
        RingLayout(**args)  # type: ignore[arg-type]


def test_out_of_range_indices() -> None:
    lay = RingLayout(2, 8, 3)
    with pytest.raises(MisuseError, match=r"chunk index 3 out of range 0\.\.2"):
        lay.data_offset(3)
    with pytest.raises(MisuseError, match=r"chunk index -1 out of range"):
        lay.flags_offset(-1)
    with pytest.raises(MisuseError, match=r"position among the local readers, not its global rank"):
        lay.read_flag_offset(0, 2)
    with pytest.raises(MisuseError, match=r"reader index 2 out of range 0\.\.1"):
        lay.sleep_offset(2)


def test_a_reader_index_error_is_the_whole_message() -> None:
    lay = RingLayout(2, 8, 3)
    with pytest.raises(MisuseError) as info:
        lay.sleep_offset(2)
    assert str(info.value) == (
        "reader index 2 out of range 0..1: a reader's flag index is its position among the "
        "local readers, not its global rank"
    )


def test_max_chunks_bound_is_inclusive_and_its_error_says_so() -> None:
    assert RingLayout(1, 1, MAX_CHUNKS).max_chunks == MAX_CHUNKS
    with pytest.raises(MisuseError) as info:
        RingLayout(1, 1, MAX_CHUNKS + 1)
    assert str(info.value) == (
        f"ring geometry: max_chunks must be at most {MAX_CHUNKS} (each chunk costs views and a "
        f"flag row in every process), got {MAX_CHUNKS + 1}"
    )


def test_capacity_rule_message() -> None:
    lay = RingLayout(1, 16, 2)
    lay.check_fits(16)
    lay.check_fits(0)
    with pytest.raises(MisuseError) as info:
        lay.check_fits(17)
    msg = str(info.value)
    assert "message of 17 bytes does not fit" in msg
    assert "must fit in one chunk" in msg
    assert "max_chunk_bytes=16" in msg


def test_segment_has_exactly_the_layout_size() -> None:
    import os

    with ShmRingBuffer(3, 100, 4) as ring:
        size = os.stat(f"/dev/shm/{ring.name}").st_size
        assert size == ring.layout.total_bytes == 64 + (100 + 1 + 3) * 4
