"""Handles and arguments that can never work: each is refused with a library error
naming the field or the cause -- at once, or within the dead-peer bound with
``timeout=None`` too -- never a raw ZeroMQ error, a ``TypeError``, a wait until the
timeout, or a wrong diagnosis; and no key, secret or tag shows in any error, log
line or repr, whatever type it arrives in."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from verifiedring import BrokenPeerError, MessageQueue, MisuseError, ShmRingBuffer
from verifiedring.queue import LocalReader, QueueWriter, RemoteReader
from verifiedring.queue.handle import Handle

T = 10.0
LOOPBACK = "127.0.0.1"
#: The dead-peer bound: a reader that can never complete is told within it.
BOUND = 1.5


@pytest.fixture
def writer() -> Iterator[MessageQueue]:
    """A writer with a local reader (rank 0) and a remote one (rank 1) to come."""
    with MessageQueue(2, 1, [0], connect_ip=LOOPBACK) as w:
        yield w


def _error(call: Callable[[], Any], bound: float = T) -> tuple[BaseException, float]:
    """What ``call`` raised, and after how many seconds (run in a thread, bounded)."""
    box: list[Any] = []

    def run() -> None:
        t0 = time.monotonic()
        try:
            call()
        except BaseException as exc:  # handed to the test
            box.append((exc, time.monotonic() - t0))
        else:
            box.append((None, time.monotonic() - t0))

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(bound)
    assert box, f"{call} still running after {bound} s"
    exc, seconds = box[0]
    assert exc is not None, f"{call} raised nothing"
    return exc, seconds


def _attach_and_wait(handle: Handle, rank: int, timeout: float | None = None) -> None:
    r = MessageQueue.create_from_handle(handle, rank)
    try:
        r.wait_until_ready(timeout)
    finally:
        r.close()


BAD_ADDRESSES = [
    ("local_subscribe_addr", "garbage://x", 0), ("local_subscribe_addr", "ipc://", 0),
    ("remote_subscribe_addr", "tcp://nonsense", 1), ("remote_subscribe_addr", "tcp://h:0", 1),
    ("remote_ack_addr", "no-such:://", 1), ("remote_ack_addr", "tcp://127.0.0.1:70000", 1),
]


@pytest.mark.parametrize("field,value,rank", BAD_ADDRESSES, ids=[f"{f}={v}" for f, v, _ in
                                                                 BAD_ADDRESSES])
def test_a_handle_address_zeromq_cannot_use_is_a_misuse_error_naming_the_field(
    writer: MessageQueue, field: str, value: str, rank: int
) -> None:
    changes: dict[str, Any] = {field: value}
    bad = dataclasses.replace(writer.export_handle(), **changes)
    with pytest.raises(MisuseError) as info:
        MessageQueue.create_from_handle(bad, rank)
    assert str(info.value).startswith(f"handle.{field}={value!r} is no "), info.value


@pytest.mark.parametrize("key", ["server_public", "client_public", "client_secret"])
@pytest.mark.parametrize("kind", ["str", "short", "int"])
def test_a_curve_key_of_the_wrong_type_or_length_is_refused_naming_it_not_showing_it(
    writer: MessageQueue, key: str, kind: str
) -> None:
    h = writer.export_handle()
    assert h.curve is not None
    real: bytes = getattr(h.curve, key)
    value: Any = {"str": real.decode(), "short": real[:-1], "int": 7}[kind]
    curve = dataclasses.replace(h.curve, **{key: value})
    with pytest.raises(MisuseError) as info:
        MessageQueue.create_from_handle(dataclasses.replace(h, curve=curve), 1)
    message = str(info.value)
    assert message.startswith(f"handle.curve.{key} must be 40 bytes (a z85 CURVE key), got a "
                              f"value of type {type(value).__name__}"), message
    assert real.decode()[:8] not in message and repr(value) not in message


@pytest.mark.parametrize("field", ["remote_subscribe_addr", "remote_ack_addr", "curve"])
def test_a_handle_without_its_remote_part_names_the_missing_field(
    writer: MessageQueue, field: str
) -> None:
    changes: dict[str, Any] = {field: None}
    bad = dataclasses.replace(writer.export_handle(), **changes)
    with pytest.raises(MisuseError) as info:
        MessageQueue.create_from_handle(bad, 1)
    assert str(info.value).startswith(
        f"handle.{field} is None but the queue has 1 remote reader(s): the handle was altered"
    ), info.value


def test_a_rank_past_the_local_readers_of_a_queue_without_remote_readers_is_refused() -> None:
    with MessageQueue(1, 1) as w, pytest.raises(MisuseError) as info:
        MessageQueue.create_from_handle(w.export_handle(), 1)
    assert str(info.value) == (
        "rank 1 is not in local_reader_ranks [0] and the queue has no remote readers "
        "(n_reader=1 == n_local_reader=1): rank 1 is no reader"
    )


def test_each_role_class_attaches_only_its_own_ranks_as_its_typed_constructor() -> None:
    w = QueueWriter(2, 1, [0], connect_ip=LOOPBACK)
    h = w.export_handle()
    try:
        with pytest.raises(MisuseError, match=(
            r"^rank 0 is not a remote reader of this queue \(local_reader_ranks \[0\]\): it "
            r"cannot attach as a RemoteReader \(MessageQueue.create_from_handle picks the "
            r"role from the rank\)$"
        )):
            RemoteReader(h, 0)
        with pytest.raises(MisuseError, match=(
            r"^rank 1 is not a local reader of this queue \(local_reader_ranks \[0\]\): it "
            r"cannot attach as a LocalReader"
        )):
            LocalReader(h, 1)
        local, remote = LocalReader(h, 0), RemoteReader(h, 1)  # the refusals left no trace
        try:
            w.wait_until_ready(T)
            local.wait_until_ready(T)
            remote.wait_until_ready(T)
            w.enqueue({"step": 1}, timeout=T)
            assert (local.dequeue(T), remote.dequeue(T)) == ({"step": 1}, {"step": 1})
        finally:
            local.close()
            remote.close()
    finally:
        w.close()


def test_a_writer_pid_of_zero_is_refused(writer: MessageQueue) -> None:
    bad = dataclasses.replace(writer.export_handle(), writer_pid=0)
    for rank in (0, 1):
        with pytest.raises(MisuseError, match=r"^handle.writer_pid must be an int >= 1, got 0$"):
            MessageQueue.create_from_handle(bad, rank)


def test_a_missing_ipc_socket_is_refused_at_once_also_with_no_timeout(
    writer: MessageQueue,
) -> None:
    h = writer.export_handle()
    assert h.local_subscribe_addr is not None
    bad = dataclasses.replace(h, local_subscribe_addr=h.local_subscribe_addr + "-gone")
    exc, seconds = _error(lambda: _attach_and_wait(bad, 0, None))
    assert isinstance(exc, BrokenPeerError), exc
    path = bad.local_subscribe_addr.removeprefix("ipc://")  # type: ignore[union-attr]
    assert f"the writer's ipc socket {path!r} does not exist" in str(exc), exc
    assert seconds < BOUND


@pytest.mark.parametrize("rank", [0, 1], ids=["local", "remote"])
def test_a_wrong_hmac_key_is_refused_at_once_naming_the_key_not_showing_it(
    writer: MessageQueue, rank: int
) -> None:
    """Before, a remote reader waited for READY until its timeout (the writer drops a
    hello it cannot verify): the handle's tag does not verify under the key."""
    wrong = bytes(32)
    bad = dataclasses.replace(writer.export_handle(), hmac_key=wrong)
    exc, seconds = _error(lambda: _attach_and_wait(bad, rank, None))
    assert isinstance(exc, BrokenPeerError), exc
    assert "handle.ring_tag does not verify under handle.hmac_key" in str(exc), exc
    assert "the key is not the writer's" in str(exc) and repr(wrong) not in str(exc)
    assert seconds < BOUND


@contextlib.contextmanager
def _closed_writers_handle() -> Iterator[Handle]:
    """The handle of a remote writer that closed, its two ports held meanwhile by
    sockets that are bound and do not listen: a connection there is refused, and no
    other process's bind takes the port (a test running beside this one once did:
    the reader then met another queue's CURVE handshake, not a closed one)."""
    for _ in range(5):
        with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
            h = w.export_handle()
        held: list[socket.socket] = []
        try:
            for address in (h.remote_subscribe_addr, h.remote_ack_addr):
                assert address is not None
                host, port = address.removeprefix("tcp://").rsplit(":", 1)
                held.append(sock := socket.socket())
                if not _bound_once_free(sock, (host, int(port))):
                    break  # taken by another process meanwhile: try another writer
            else:
                yield h
                return
        finally:
            for sock in held:
                sock.close()
    raise AssertionError("every closed writer's port was taken before it could be held")


def _bound_once_free(sock: socket.socket, address: tuple[str, int]) -> bool:
    """``sock`` bound to ``address`` once the closed writer's IO thread has let go of
    it (libzmq closes a listener asynchronously), within ``BOUND``; false if not."""
    deadline = time.monotonic() + BOUND
    while True:
        try:
            sock.bind(address)
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)


def test_a_remote_reader_of_a_closed_queue_is_told_within_the_bound_with_no_timeout() -> None:
    """Before, it waited for READY until its timeout (forever with None)."""
    with _closed_writers_handle() as h:
        exc, seconds = _error(lambda: _attach_and_wait(h, 0, None))
    assert isinstance(exc, BrokenPeerError), exc
    assert f"nothing accepts connections at {h.remote_subscribe_addr}: the writer closed the " \
        "queue or died" in str(exc), exc
    assert seconds < BOUND


LATE_WHY = ("refused its connection: its handshake is over (READY went to the readers that "
            "joined in time): a reader cannot join a running queue, nor attach as a rank "
            "that is no reader or whose remote slot is taken")


@pytest.mark.parametrize("rank", [-1, 1], ids=["rankless", "rank n_reader"])
def test_a_remote_reader_after_the_handshake_is_refused_with_the_writer_idle(rank: int) -> None:
    """n_reader=1, its remote rank 0 joined and READY sent; the writer then idles (no send,
    no wait). A rankless reader, or rank 1 (== n_reader: no reader here, the one remote
    slot taken), arriving now used to wait for READY until its timeout (forever with
    None); now the writer's gate refuses its connection and it says so (timeout=None)."""
    with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        r = MessageQueue.create_from_handle(h, 0)
        try:
            ready = threading.Thread(target=r.wait_until_ready, args=(T,), daemon=True)
            ready.start()
            w.wait_until_ready(T)
            ready.join(T)
            exc, seconds = _error(lambda: _attach_and_wait(h, rank, None))
        finally:
            r.close()
    assert isinstance(exc, BrokenPeerError), exc
    who = "without a rank" if rank == -1 else f"rank {rank}"
    assert str(exc) == (f"remote reader {who} (pid {os.getpid()}): the writer (pid "
                        f"{h.writer_pid} on host {h.writer_host}) {LATE_WHY}"), exc
    assert seconds < BOUND


def test_the_ack_socket_still_admits_a_reader_after_ready() -> None:
    """Only the frames' socket closes its door at READY: a reader counted then may complete
    its acknowledgement connection later (under load it does; before, that connection
    was refused and the writer waited for acks that never came)."""
    from verifiedring.queue.curve import connect_as_reader

    with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        assert h.curve is not None and h.remote_ack_addr is not None
        r = MessageQueue.create_from_handle(h, 0)
        push: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.PUSH)
        try:
            ready = threading.Thread(target=r.wait_until_ready, args=(T,), daemon=True)
            ready.start()
            w.wait_until_ready(T)
            ready.join(T)
            connect_as_reader(push, h.curve)
            monitor = push.get_monitor_socket(
                zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
            push.connect(h.remote_ack_addr)
            assert monitor.poll(int(T * 1000)), "no handshake event"
            event = monitor.recv_multipart()
            assert int.from_bytes(event[0][:2], "little") == zmq.EVENT_HANDSHAKE_SUCCEEDED
            push.disable_monitor()
            monitor.close(linger=0)
        finally:
            push.close(linger=0)
            r.close()


@pytest.mark.parametrize("keys", ["client", "server"])
def test_a_wrong_curve_key_says_authentication_failed_not_a_dead_writer(
    keys: str,
) -> None:
    """Another queue's client pair, or another server key: the writer is alive and
    answers; the reader (timeout=None) says the handshake failed, within the bound."""
    with MessageQueue(1, 0, connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        assert h.curve is not None
        public, secret = zmq.curve_keypair()
        curve = (dataclasses.replace(h.curve, client_public=public, client_secret=secret)
                 if keys == "client" else dataclasses.replace(h.curve, server_public=public))
        exc, seconds = _error(lambda: _attach_and_wait(dataclasses.replace(h, curve=curve), 0))
    assert isinstance(exc, BrokenPeerError), exc
    message = str(exc)
    assert "the CURVE handshake with the writer (pid " in message, message
    assert "authentication" in message and "is gone" not in message, message
    assert "handle.curve is not this queue's" in message, message
    assert seconds < BOUND


def test_a_connect_ip_that_is_not_of_this_host_is_a_misuse_error_naming_it() -> None:
    with pytest.raises(MisuseError) as info:
        MessageQueue(1, 0, connect_ip="192.0.2.1")  # TEST-NET-1: no host has it
    assert str(info.value).startswith("connect_ip='192.0.2.1' is not an address of this host"), (
        info.value
    )


class _NotAnObserver:
    def begin(self, actor: str) -> None: ...


def test_an_observer_without_the_protocol_is_refused_at_construction() -> None:
    for bad in (object(), _NotAnObserver()):
        with pytest.raises(MisuseError) as info:
            MessageQueue(1, 1, observer=bad)
        assert str(info.value).startswith(f"observer={bad!r} is no QueueObserver: it lacks ")
    with MessageQueue(1, 1) as w, pytest.raises(MisuseError, match="is no QueueObserver"):
        MessageQueue.create_from_handle(w.export_handle(), 0, observer=_NotAnObserver())  # type: ignore[arg-type]
    with ShmRingBuffer(1, 4096, 2) as ring:
        with pytest.raises(MisuseError, match="is no StepObserver: it lacks before_step, "):
            ring.writer(observer=object())  # type: ignore[arg-type]
        ring.writer()  # the refusal claimed nothing


@pytest.mark.parametrize("value", ["1e-9", "0.0005"])
def test_a_stall_interval_below_a_millisecond_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("VLLM_RINGBUFFER_WARNING_INTERVAL", value)
    with pytest.raises(MisuseError) as info:
        MessageQueue(1, 1)
    assert str(info.value).startswith(f"the stall-log interval {float(value)!r} s "), info.value


# --- no secret anywhere ----------------------------------------------------------------


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _forms(secret: Any) -> list[str]:
    """The ways a secret could show in text."""
    if isinstance(secret, (bytes, bytearray)):
        raw = bytes(secret)
        return [repr(raw), raw.hex(), raw.decode("latin-1"), repr(secret)]
    return [repr(secret), str(secret)] if isinstance(secret, str) else [repr(secret)]


def test_no_key_secret_or_tag_shows_in_any_error_log_line_or_repr(
    writer: MessageQueue,
) -> None:
    """Each secret field of the handle (the HMAC key, the ring tag, each CURVE key) fed
    a wrong type and a wrong value, to a local and a remote reader: every message,
    every repr and every log line is free of the real secrets and of what was fed."""
    h = writer.export_handle()
    assert h.curve is not None
    secrets = [h.hmac_key, h.ring_tag, h.curve.server_public, h.curve.client_public,
               h.curve.client_secret]
    other_public, other_secret = zmq.curve_keypair()
    fed: list[tuple[str, Any]] = []
    for name, real, wrong in (
        ("hmac_key", h.hmac_key, b"k" * 32), ("ring_tag", h.ring_tag, b"t" * 16),
    ):
        fed += [(name, real.decode("latin-1")), (name, bytearray(real)), (name, wrong)]
    for key, wrong in (("server_public", other_public), ("client_public", other_public),
                       ("client_secret", other_secret)):
        real = getattr(h.curve, key)
        for value in (real.decode(), bytearray(real), wrong):
            keys: dict[str, Any] = {key: value}
            fed.append(("curve", dataclasses.replace(h.curve, **keys)))
    records = _Records()
    logger = logging.getLogger("verifiedring")
    logger.addHandler(records)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    texts: list[str] = [repr(h), repr(writer)]
    try:
        for name, value in fed:
            field: dict[str, Any] = {name: value}
            bad = dataclasses.replace(h, **field)
            texts.append(repr(bad))
            for rank in (0, 1):
                exc, _ = _error(functools.partial(_attach_and_wait, bad, rank, 0.5))
                texts += [str(exc), repr(exc)]
    finally:
        logger.removeHandler(records)
        logger.setLevel(old_level)
    texts += records.lines
    shown = [v.server_public if name == "curve" else v for name, v in fed]
    shown += [v.client_public for name, v in fed if name == "curve"]
    shown += [v.client_secret for name, v in fed if name == "curve"]
    for secret in secrets + shown:
        for form in _forms(secret):
            for text in texts:
                assert form not in text, (form, text)


def test_a_role_class_asked_for_the_other_roles_rank_refuses_and_the_queue_goes_on(
    writer: MessageQueue,
) -> None:
    """``LocalReader.create_from_handle`` (a typed constructor) for a remote rank, and
    ``RemoteReader``'s for a local one, raise MisuseError naming the class, the rank and
    the role the handle gives it, before any resource is held; the ranks then attach."""
    h = writer.export_handle()
    with pytest.raises(MisuseError, match=r"^LocalReader\.create_from_handle: rank 1 of "
                       r"this handle is a RemoteReader$"):
        LocalReader.create_from_handle(h, 1)
    with pytest.raises(MisuseError, match=r"^RemoteReader\.create_from_handle: rank 0 of "
                       r"this handle is a LocalReader$"):
        RemoteReader.create_from_handle(h, 0)
    local, remote = LocalReader.create_from_handle(h, 0), RemoteReader.create_from_handle(h, 1)
    with local, remote:
        for q in (writer, local, remote):
            q.wait_until_ready(T)
        writer.enqueue({"step": 1})
        assert [local.dequeue(T), remote.dequeue(T)] == [{"step": 1}, {"step": 1}]
