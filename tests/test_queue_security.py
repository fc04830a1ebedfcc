"""MessageQueue security: CURVE on the remote channel, no wildcard binds, private files."""

from __future__ import annotations

import dataclasses
import os
import pickle
import stat
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq
from support.outsiders import Outsiders

from verifiedring import BrokenPeerError, MessageQueue, MisuseError, RingTimeoutError
from verifiedring.queue import QueueWriter, RemoteReader
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
def remote_pair() -> Iterator[tuple[QueueWriter, RemoteReader]]:
    w = QueueWriter(1, 0, connect_ip=LOOPBACK)
    r = RemoteReader(w.export_handle(), 1)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    UNPICKLED.clear()
    yield w, r
    r.close()
    w.close()


def test_outsiders_cannot_subscribe_read_or_delay_the_writer(
    remote_pair: tuple[QueueWriter, RemoteReader],
) -> None:
    """Without the Handle's client key -- plaintext, or CURVE with made-up keys -- a
    subscriber never completes the handshake: it reads nothing, and a subscriber that
    never reads cannot hold up an enqueue (the writer has no pipe to it)."""
    w, r = remote_pair
    h = w.export_handle()
    assert h.remote_subscribe_addr is not None and h.curve is not None
    with Outsiders(h.curve.server_public) as outsider:
        subs = [outsider.socket(zmq.SUB, h.remote_subscribe_addr, keys=k) for k in (False, True)]
        for sock in subs:
            outsider.wait_refused(sock, T)  # the writer has seen each one, and refused it
        payload = b"secret-" * 20_000  # far more than any pipe holds unread
        for i in range(30):
            w.enqueue((i, payload), timeout=1.0)  # never delayed by an outsider
            assert r.dequeue(T) == (i, payload)
        for sock in subs:
            assert not sock.poll(300), "an outsider received a frame"


def test_outsiders_are_refused_by_their_keys_before_the_handshake_too() -> None:
    """Before READY the frames socket's door is open, to the Handle's key holders only:
    a subscriber with made-up CURVE keys is refused then too (after READY every late
    connection is refused, keys or not), and the queue's reader then gets every message."""
    with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        assert h.remote_subscribe_addr is not None and h.curve is not None
        with Outsiders(h.curve.server_public) as outsider:
            sub = outsider.socket(zmq.SUB, h.remote_subscribe_addr, keys=True)
            outsider.wait_refused(sub, T)
            with MessageQueue.create_from_handle(h, 1) as r:
                w.wait_until_ready(T)
                r.wait_until_ready(T)
                for i in range(3):
                    w.enqueue(i, timeout=T)
                assert [r.dequeue(T) for _ in range(3)] == [0, 1, 2]


def test_outsiders_cannot_acknowledge(remote_pair: tuple[QueueWriter, RemoteReader]) -> None:
    """A forged ack (plaintext or made-up keys) never reaches the writer's flow control:
    the writer refuses each sender's handshake, so nothing it sent is even counted as a
    rejected frame."""
    w, r = remote_pair
    h = w.export_handle()
    assert h.remote_ack_addr is not None and h.curve is not None
    window = h.remote_window
    with Outsiders(h.curve.server_public) as outsider:
        ackers = [outsider.socket(zmq.PUSH, h.remote_ack_addr, keys=k) for k in (False, True)]
        body = (1).to_bytes(4, "little") + (10**6).to_bytes(8, "little")
        for sock in ackers:
            sock.send(body, zmq.NOBLOCK)  # queued on its pipe until a handshake completes
            outsider.wait_refused(sock, T)
        for i in range(window):
            w.enqueue(i, timeout=T)
        with pytest.raises(RingTimeoutError, match=r"\{1: 0\}"):
            w.enqueue(window, timeout=0.3)  # the forged count opened nothing
        assert w.rejected_frames == 0, "a forged ack got past the handshake"
        assert [r.dequeue(T) for _ in range(window)] == list(range(window))


def test_a_key_holder_sending_junk_acks_is_counted_and_ignored() -> None:
    """Malformed acknowledgements (wrong size, unknown rank, a count beyond what was
    sent, several frames) are dropped, counted, and logged rate-limited."""
    with QueueWriter(1, 0, connect_ip=LOOPBACK, remote_window=4) as w:
        h = w.export_handle()
        assert h.remote_ack_addr is not None and h.curve is not None
        with MessageQueue.create_from_handle(h, 1) as r:
            w.wait_until_ready(T)
            r.wait_until_ready(T)
            ctx: zmq.Context[Any] = zmq.Context()
            push = ctx.socket(zmq.PUSH)  # a key holder: the Handle's client keys
            push.curve_serverkey = h.curve.server_public
            push.curve_publickey = h.curve.client_public
            push.curve_secretkey = h.curve.client_secret
            push.connect(h.remote_ack_addr)
            try:
                junk = [
                    [b"x"], [(7).to_bytes(4, "little") + (1).to_bytes(8, "little")],
                    [(1).to_bytes(4, "little") + (99).to_bytes(8, "little")], [b"a", b"b"],
                ]
                for parts in junk:
                    push.send_multipart(parts)
                for i in range(4):
                    w.enqueue(i, timeout=T)
                with pytest.raises(RingTimeoutError, match=r"\{1: 0\}"):
                    w.enqueue(4, timeout=0.5)
                assert w.rejected_frames == len(junk)
                assert [r.dequeue(T) for _ in range(4)] == [0, 1, 2, 3]
                w.enqueue(4, timeout=T)  # the real ack opened the window
                assert r.dequeue(T) == 4
            finally:
                push.close(linger=0)
                ctx.term()


def test_reader_attached_to_an_impostor_never_unpickles() -> None:
    """An impostor writer (plaintext, or CURVE with its own keys) at the handle's address:
    the reader completes no handshake, so it never receives, let alone unpickles."""
    with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
        handle = w.export_handle()
        for curve in (False, True):
            ctx: zmq.Context[Any] = zmq.Context()
            impostor = ctx.socket(zmq.XPUB)
            if curve:
                impostor.curve_server = True
                impostor.curve_secretkey = zmq.curve_keypair()[1]
            impostor.bind(f"tcp://{LOOPBACK}:0")
            addr = impostor.getsockopt(zmq.LAST_ENDPOINT).decode()
            fake = dataclasses.replace(handle, remote_subscribe_addr=addr)
            UNPICKLED.clear()
            try:
                with MessageQueue.create_from_handle(fake, 1) as r:
                    deadline = time.monotonic() + 0.5
                    while time.monotonic() < deadline:  # whatever it can, it sends
                        impostor.send_multipart([control_header(READY, 0)])
                        impostor.send_multipart(data_parts(Evil("impostor"), 0))
                        time.sleep(0.05)
                    # the handshake fails: the reader says so, and never took a frame
                    with pytest.raises(
                        BrokenPeerError, match=r"the CURVE handshake with the writer .* failed"
                    ):
                        r.wait_until_ready(timeout=T)
            finally:
                impostor.close(linger=0)
                ctx.term()
    assert UNPICKLED == []


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


@pytest.mark.parametrize(
    "ip", ["", "*", "0", "0.0", "0.0.0.0", "::", "::0", "0000::0000", "0:0:0:0:0:0:0:0"]
)
def test_unspecified_addresses_are_refused(ip: str) -> None:
    with pytest.raises(MisuseError, match="connect_ip") as info:
        MessageQueue(2, 1, connect_ip=ip)
    assert repr(ip) in str(info.value)
    with MessageQueue(2, 1, connect_ip=LOOPBACK) as q:  # nothing was left half-built
        assert q.export_handle().remote_subscribe_addr is not None


def test_a_signature_verifies_only_its_own_parts_under_its_own_key() -> None:
    from verifiedring.queue.sockets import Signer

    a, b = Signer(b"k" * 32), Signer(b"j" * 32)
    parts = [b"topic", memoryview(b"body")]
    mac = a.sign(parts)
    assert a.verify(mac, parts) and a.verify(bytearray(mac), [b"topic", b"body"])
    assert not a.verify(mac, [b"topic", b"bodY"])
    assert not b.verify(mac, parts)
    assert not a.verify(mac[:-1] + bytes([mac[-1] ^ 1]), parts)
