"""MessageQueue security: authenticated remote frames, no wildcard binds, private files."""

from __future__ import annotations

import dataclasses
import os
import pickle
import stat
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from verifiedring import MessageQueue, RingTimeoutError
from verifiedring.queue.sockets import Signer, new_key
from verifiedring.queue.wire import HEADER, OVERFLOW, READY, control_header
from verifiedring.shm import SHM_DIR

LOOPBACK = "127.0.0.1"
T = 10.0

UNPICKLED: list[str] = []


def _tripwire(tag: str) -> None:
    UNPICKLED.append(tag)


class Evil:
    """Records (and fails) if anyone ever unpickles it."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __reduce__(self) -> tuple[Any, ...]:
        return (_tripwire, (self.tag,))


def data_parts(obj: Any, seq: int) -> list[bytes]:
    stream = pickle.dumps(obj, protocol=5)
    return [HEADER.pack(OVERFLOW, seq, len(stream), 0), stream]


@pytest.fixture
def remote_pair() -> Iterator[tuple[MessageQueue, MessageQueue]]:
    w = MessageQueue(1, 0, connect_ip=LOOPBACK)
    r = MessageQueue.create_from_handle(w.export_handle(), 1)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    UNPICKLED.clear()
    yield w, r
    r.close()
    w.close()


def test_forged_and_tampered_frames_are_dropped_unread(
    remote_pair: tuple[MessageQueue, MessageQueue],
) -> None:
    w, r = remote_pair
    sock = w._remote_sock
    assert sock is not None
    # forged: signed with a key the attacker made up
    parts = data_parts(Evil("forged"), 0)
    sock.send_multipart([Signer(new_key()).sign(parts), *parts])
    # tampered: a genuine MAC over a benign object, payload swapped for Evil
    genuine = Signer(w.export_handle().hmac_key)
    benign = data_parts("benign", 0)
    evil = data_parts(Evil("tampered"), 0)
    sock.send_multipart([genuine.sign(benign), evil[0], evil[1]])
    # truncated: no MAC at all
    sock.send_multipart(evil)
    with pytest.raises(RingTimeoutError):
        r.dequeue(timeout=0.5)
    assert r.rejected_frames == 3
    assert UNPICKLED == []
    # the queue is still usable and in sequence
    w.enqueue({"real": 1}, timeout=T)
    assert r.dequeue(T) == {"real": 1}
    assert UNPICKLED == []


def test_reader_attached_to_an_impostor_never_unpickles() -> None:
    with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
        handle = w.export_handle()
        ctx = zmq.Context()
        impostor = ctx.socket(zmq.XPUB)
        impostor.bind(f"tcp://{LOOPBACK}:0")
        addr = impostor.getsockopt(zmq.LAST_ENDPOINT).decode()
        fake = dataclasses.replace(handle, remote_subscribe_addr=addr)
        UNPICKLED.clear()
        with MessageQueue.create_from_handle(fake, 1) as r:
            assert impostor.poll(int(T * 1000))  # the reader's subscription arrived
            wrong = Signer(new_key())
            ready = [control_header(READY, 0)]
            impostor.send_multipart([wrong.sign(ready), *ready])
            parts = data_parts(Evil("impostor"), 0)
            impostor.send_multipart([wrong.sign(parts), *parts])
            with pytest.raises(RingTimeoutError, match="READY"):
                r.wait_until_ready(timeout=0.5)
            assert r.rejected_frames >= 1
        impostor.close(linger=0)
        ctx.term()
    assert UNPICKLED == []


def test_forged_acknowledgement_does_not_open_the_window() -> None:
    with MessageQueue(1, 0, connect_ip=LOOPBACK, remote_window=4) as w:
        h = w.export_handle()
        with MessageQueue.create_from_handle(h, 1) as r:
            w.wait_until_ready(T)
            r.wait_until_ready(T)
            ctx = zmq.Context()
            push = ctx.socket(zmq.PUSH)
            push.connect(h.remote_ack_addr)
            body = (1).to_bytes(4, "little") + (10**6).to_bytes(8, "little")
            push.send_multipart([Signer(new_key()).sign([body]), body])
            for i in range(4):
                w.enqueue(i, timeout=T)
            with pytest.raises(RingTimeoutError, match=r"\{1: 0\}"):
                w.enqueue(4, timeout=0.5)
            assert w.rejected_frames == 1
            assert [r.dequeue(T) for _ in range(4)] == [0, 1, 2, 3]
            push.close(linger=0)
            ctx.term()


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as in /proc/net/tcp*) listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            addr, hexport = local.rsplit(":", 1)
            if int(hexport, 16) == port and state == "0A":  # LISTEN
                found.append(addr)
    return found


def test_endpoints_are_not_wildcards_and_files_are_private() -> None:
    with MessageQueue(2, 1, [0], connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        assert h.local_subscribe_addr is not None and h.local_subscribe_addr.startswith("ipc://")
        for addr in (h.remote_subscribe_addr, h.remote_ack_addr):
            assert addr is not None and addr.startswith(f"tcp://{LOOPBACK}:"), addr
            port = int(addr.rsplit(":", 1)[1])
            assert port != 0
            listening = _listening(port)
            if listening:  # /proc available: bound on loopback only
                assert set(listening) == {"0100007F"}, listening
        path = h.local_subscribe_addr[len("ipc://") :]
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        assert h.buffer_handle is not None
        seg = os.path.join(SHM_DIR, h.buffer_handle.name)
        assert stat.S_IMODE(os.stat(seg).st_mode) == 0o600
        assert len(h.hmac_key) >= 32
        key = h.hmac_key
        for shown in (repr(h), str(h)):
            for form in (repr(key), key.hex(), str(key)):
                assert form not in shown
