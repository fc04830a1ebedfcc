"""The vLLM-shaped surface of the compat layer: Handle, queue attributes, module
names tests patch, log records, the SGLang switch. Exact values and types."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from verifiedring import BrokenPeerError, MessageQueue, MisuseError
from verifiedring.compat import vllm as shim

T = 10.0
LOOPBACK = "127.0.0.1"


def test_handle_has_vllms_shape_and_defaults() -> None:
    empty = shim.Handle()
    assert empty.local_reader_ranks == [] and isinstance(empty.local_reader_ranks, list)
    assert (empty.buffer_handle, empty.local_subscribe_addr, empty.local_notify_addr,
            empty.remote_subscribe_addr, empty.tensor_arena_handle) == (None,) * 5
    assert empty.remote_addr_ipv6 is False
    with pytest.raises(MisuseError, match="no reader"):
        MessageQueue.create_from_handle(empty, 0)


def test_exported_handle_lists_ranks_and_replace_keeps_the_tamper_check() -> None:
    with MessageQueue(3, 2, [2, 0], max_chunk_bytes=256, max_chunks=2,
                      connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        assert h.local_reader_ranks == [2, 0] and type(h.local_reader_ranks) is list
        assert h.remote_addr_ipv6 is False and h.local_notify_addr is None
        assert pickle.loads(pickle.dumps(h)) == h
        same = dataclasses.replace(h, local_reader_ranks=[2, 0])
        assert same == h
        assert h.buffer_handle is not None
        grown = dataclasses.replace(h.buffer_handle, max_chunks=3)
        with pytest.raises(BrokenPeerError, match="altered"):
            MessageQueue.create_from_handle(dataclasses.replace(h, buffer_handle=grown), 0)


def test_an_ipv6_writer_says_so_in_its_handle() -> None:
    try:
        w = MessageQueue(1, 0, connect_ip="::1")
    except Exception as exc:  # no IPv6 loopback on this host
        pytest.skip(f"no IPv6 loopback: {exc}")
    with w:
        h = w.export_handle()
        assert h.remote_addr_ipv6 is True and h.remote_subscribe_addr.startswith("tcp://[::1]:")
        r = MessageQueue.create_from_handle(h, -1)
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        w.enqueue("over v6")
        assert r.dequeue(T) == "over v6"
        r.close()
