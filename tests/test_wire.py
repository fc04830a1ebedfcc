"""The wire format byte for byte, as :mod:`verifiedring.queue.wire`'s header states it:
each frame and chunk a queue end writes, and what a reader makes of bytes it did not
expect (truncated reasons, unknown kinds, short bodies)."""

from __future__ import annotations

import pickle
import struct

import pytest

from verifiedring import MisuseError
from verifiedring.errors import DecodeError
from verifiedring.queue import wire


def header(kind: int, seq: int, nstream: int, nbuf: int) -> bytes:
    """The header as the module docstring lays it out: u8, u64, u64, u32, little endian."""
    return struct.pack("<BQQI", kind, seq, nstream, nbuf)


def test_the_header_is_21_bytes_little_endian() -> None:
    assert wire.HEADER_BYTES == 21
    assert wire.control_header(wire.SHUTDOWN, 7) == header(3, 7, 0, 0)
    assert wire.read_header(header(9, 2**40, 5, 3)) == (9, 2**40, 5, 3)


def test_control_frames_are_exact() -> None:
    assert wire.late_frame() == header(11, 0, 0, 0)
    assert wire.abort_frame(7, "pickling raised") == [header(8, 7, 0, 0), b"pickling raised"]
    assert wire.broken_frame(12, "reader 2 died") == [header(10, 12, 0, 0), b"reader 2 died"]


def test_a_reason_that_utf8_cannot_encode_is_sent_with_a_replacement() -> None:
    # an exception's text can carry a lone surrogate (a file name decoded with
    # surrogateescape): the frame still goes out, with "?" in its place
    assert wire.abort_frame(1, "a\udcffb")[1] == b"a?b"
    assert wire.broken_frame(1, "a\udcffb")[1] == b"a?b"
    chunk = memoryview(bytearray(wire.HEADER_BYTES + 8))
    wire.write_abort(chunk, 4, 2, "a\udcffb")
    assert bytes(chunk[:24]) == header(8, 4, 3, 2) + b"a?b"


def test_an_abort_reason_is_cut_to_its_chunk_and_read_back_with_a_replacement() -> None:
    chunk = memoryview(bytearray(wire.HEADER_BYTES + 4))
    wire.write_abort(chunk, 9, 3, "é€x")  # 2 + 3 + 1 bytes: the cut falls inside the euro sign
    assert bytes(chunk) == header(8, 9, 4, 3) + b"\xc3\xa9\xe2\x82"
    assert wire.read_header(chunk) == (wire.RUN_ABORT, 9, 4, 3)
    assert wire.abort_reason(chunk[wire.HEADER_BYTES :]) == "é\ufffd"
    assert wire.abort_reason(b"plain") == "plain"


def test_kind_names() -> None:
    assert [wire.kind_name(k) for k in range(12)] == [
        "INLINE", "OVERFLOW", "READY", "SHUTDOWN", "INLINE_LENT", "RUN_FIRST",
        "RUN_MORE", "RUN_LAST", "RUN_ABORT", "RAW", "BROKEN", "LATE",
    ]
    assert wire.kind_name(99) == "unknown kind 99"


def test_a_chunk_too_small_for_one_byte_is_refused_by_name() -> None:
    wire.check_chunk_bytes(22)
    with pytest.raises(MisuseError) as info:
        wire.check_chunk_bytes(21)
    assert str(info.value) == (
        "max_chunk_bytes=21 cannot hold a message: a chunk needs the 21-byte header "
        "plus at least 1 byte"
    )


def test_chunk_bytes_sums_header_lengths_stream_and_buffers() -> None:
    bufs = [memoryview(b"abc"), memoryview(b"")]
    assert wire.buffer_bytes(3) == 11
    assert wire.chunk_bytes((b"12345", bufs, False)) == 21 + 5 + (8 + 3) + (8 + 0)
    assert wire.chunk_bytes((b"12345", [], False)) == 26


def test_stamp_raw_makes_the_rest_of_the_chunk_the_message() -> None:
    chunk = memoryview(bytearray(wire.HEADER_BYTES + 5))
    chunk[wire.HEADER_BYTES :] = b"hello"
    wire.stamp_raw(chunk, 6)
    assert bytes(chunk[: wire.HEADER_BYTES]) == header(9, 6, 5, 0)
    assert wire.load_inline(chunk, wire.read_header(chunk)) == b"hello"


class Copied:
    """Pickles as ``bytes(PickleBuffer(data))``: one out-of-band buffer, copied on load."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce_ex__(self, protocol: object) -> tuple[type[bytes], tuple[pickle.PickleBuffer]]:
        return bytes, (pickle.PickleBuffer(self.data),)


def test_inline_chunks_round_trip_with_and_without_buffers() -> None:
    chunk = memoryview(bytearray(256))
    stream = pickle.dumps(("a", 1))
    wire.encode_chunk(chunk, 3, (stream, [], False), True)
    assert bytes(chunk[: wire.HEADER_BYTES]) == header(0, 3, len(stream), 0)
    assert wire.load_inline(chunk, wire.decode_chunk(chunk, 3)) == ("a", 1)  # type: ignore[arg-type]

    bufs: list[pickle.PickleBuffer] = []
    # its reconstruction, bytes(buffer), copies: the chunk's view may be lent to it
    stream = pickle.dumps(Copied(b"xyz"), protocol=5, buffer_callback=bufs.append)
    views = [b.raw() for b in bufs]
    for lend, kind in ((False, wire.INLINE), (True, wire.INLINE_LENT)):
        wire.encode_chunk(chunk, 4, (stream, views, lend), True)
        assert bytes(chunk[: wire.HEADER_BYTES + 8]) == header(kind, 4, len(stream), 1) + (
            struct.pack("<Q", 3)
        )
        assert wire.load_inline(chunk, wire.read_header(chunk)) == b"xyz"
    # not lent: the object keeps a copy of its buffer, alive once the chunk is reused
    bufs.clear()
    stream = pickle.dumps(pickle.PickleBuffer(bytearray(b"uvw")), protocol=5,
                          buffer_callback=bufs.append)
    wire.encode_chunk(chunk, 5, (stream, [b.raw() for b in bufs], False), True)
    got = wire.load_inline(chunk, wire.read_header(chunk))
    chunk[:] = bytes(256)
    assert bytes(got) == b"uvw"


def test_an_overflow_marker_is_the_header_only() -> None:
    chunk = memoryview(bytearray(64))
    wire.encode_chunk(chunk, 5, (b"s" * 40, [memoryview(b"b")], False), False)
    assert bytes(chunk) == header(1, 5, 40, 1) + bytes(64 - 21)


def test_decode_chunk_takes_only_the_expected_message_and_a_starting_kind() -> None:
    chunk = memoryview(bytearray(64))
    wire.encode_chunk(chunk, 5, (pickle.dumps(1), [], False), True)
    assert wire.decode_chunk(chunk, 5) == (0, 5, len(pickle.dumps(1)), 0)
    assert wire.decode_chunk(chunk, 4) is None
    assert wire.decode_chunk(chunk, 6) is None
    for kind in (wire.RUN_MORE, wire.RUN_LAST, wire.RUN_ABORT, wire.READY):
        wire.write_run_header(chunk, kind, 5, 0, 1)
        assert wire.decode_chunk(chunk, 5) is None
    for kind in sorted(wire.CHUNK_KINDS):
        wire.write_run_header(chunk, kind, 5, 2, 0)
        assert wire.decode_chunk(chunk, 5) == (kind, 5, 2, 0)


class Named:
    pass


def test_a_stream_that_does_not_unpickle_names_its_sequence_number_and_class() -> None:
    for protocol in (2, 4):  # GLOBAL and STACK_GLOBAL name the class differently
        stream = pickle.dumps(Named(), protocol=protocol).replace(b"Named", b"Gone_")
        with pytest.raises(DecodeError) as info:
            wire.load_frame(8, [b"", stream])
        assert info.value.seq == 8
        assert info.value.type_name == f"{__name__}.Gone_"
        chunk = memoryview(bytearray(256))
        wire.encode_chunk(chunk, 9, (stream, [], False), True)
        with pytest.raises(DecodeError) as info:
            wire.load_inline(chunk, wire.read_header(chunk))
        assert (info.value.seq, info.value.type_name) == (9, f"{__name__}.Gone_")
    with pytest.raises(DecodeError) as info:
        wire.load_frame(2, [b"", b"not a pickle"])
    assert info.value.type_name is None


def test_the_buffer_table_of_a_run() -> None:
    table = wire.buffer_table([memoryview(b"ab"), memoryview(b"cde")])
    assert bytes(table) == struct.pack("<QQQ", 2, 2, 3)
    assert wire.read_length(bytes(table[:8])) == 2
    assert wire.buffer_lengths(bytes(table[8:]), 2) == [2, 3]
    assert wire.buffer_table([]) == struct.pack("<Q", 0)


def test_frames_carry_header_stream_and_each_buffer() -> None:
    buf = memoryview(b"buf")
    parts = wire.frame_parts(3, (b"stream", [buf], False))
    assert parts[0] == header(1, 3, 6, 1)
    assert parts[1:] == [b"stream", buf]


def test_acknowledgements() -> None:
    assert wire.ack_message(3, 10) == struct.pack("<IQ", 3, 10)
    assert wire.ack_message(-1, 10) == struct.pack("<IQ", 2**32 - 1, 10)
    assert wire.read_ack(wire.ack_message(3, 10)) == (3, 10)
    assert wire.read_ack(wire.ack_message(3, 10)[:-1]) == (-1, 0)
    assert wire.read_ack(wire.ack_message(3, 10) + b"x") == (-1, 0)


def test_hellos() -> None:
    body = wire.hello_body(2, 4242, b"host-a")
    assert body == b"\xffvr-hello" + struct.pack("<II", 2, 4242) + b"host-a"
    assert wire.read_hello(body) == (2, 4242, "host-a")
    assert wire.read_hello(wire.hello_body(-1, 1, b"")) == (2**32 - 1, 1, "")
    assert wire.hello_body(0, 1, b"h" * 100)[-65:] == struct.pack("<I", 1)[-1:] + b"h" * 64
    assert wire.read_hello(wire.hello_body(0, 1, b"\xff")) == (0, 1, "\ufffd")
    assert wire.read_hello(body[:16]) is None
    assert wire.read_hello(b"\xfevr-hello" + body[9:]) is None
