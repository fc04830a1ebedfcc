"""Tests that reject known bugs no other test caught (tests/mutants/catalog.toml names them).

Each test drives one situation where a known wrong form of the code behaves
differently from the right one, and asserts exact content, order and count
(never how long anything took): a reader timing out on the ring, local ranks
listed out of order, an overflow enqueue that times out on a full ring, a
frame arriving while its reader waits on the ring, a handshake with a remote
reader missing, messages out of sequence on each channel, a forged hello,
and the sockets' high-water marks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq
from support.cursor_stand_in import CursorStandIn
from support.ranks import remote_ranks

from verifiedring import BrokenPeerError, MessageQueue, RingTimeoutError, ShmRingBuffer
from verifiedring.queue import wire
from verifiedring.queue.serialization import Serializer
from verifiedring.queue.sockets import Signer, hello_topic
from verifiedring.ring import ReaderCursor, WriterCursor
from verifiedring.testing.faults import (
    forge_chunk,
    reader_cursor,
    reader_socket,
    replace_reader_cursor,
    send_frame,
    writer_sockets,
)

T = 10.0  # bound for a wait that must succeed
LOOPBACK = "127.0.0.1"
BIG = b"B" * 50_000  # overflows a 4 KiB chunk
Make = Callable[..., tuple[MessageQueue, list[MessageQueue]]]


@pytest.fixture
def queues() -> Iterator[Make]:
    """``make(local_ranks, n_remote, **kw)``: a writer and its readers, handshaken
    (remote readers: the highest ranks no local reader has)."""
    made: list[MessageQueue] = []

    def make(local_ranks: list[int], n_remote: int = 0, **kw: Any) -> tuple[
        MessageQueue, list[MessageQueue]
    ]:
        kw.setdefault("max_chunk_bytes", 4096)
        kw.setdefault("max_chunks", 2)
        w = MessageQueue(
            len(local_ranks) + n_remote, len(local_ranks), local_ranks,
            connect_ip=LOOPBACK if n_remote else None, **kw,
        )
        made.append(w)
        h = w.export_handle()
        for rank in [*local_ranks, *remote_ranks(local_ranks, n_remote)]:
            made.append(MessageQueue.create_from_handle(h, rank))
        w.wait_until_ready(T)
        for r in made[-(len(local_ranks) + n_remote) :]:
            r.wait_until_ready(T)
        return w, made[-(len(local_ranks) + n_remote) :]

    yield make
    for q in reversed(made):
        q.close()


# --- the ring -----------------------------------------------------------------------


def _write(w: WriterCursor, payload: bytes) -> None:
    with w.acquire_write(T) as buf:
        buf[0] = len(payload)
        buf[1 : 1 + len(payload)] = payload


def _read(r: ReaderCursor, timeout: float = T) -> bytes:
    with r.acquire_read(timeout) as buf:
        return bytes(buf[1 : 1 + buf[0]])


def test_ring_reader_timeout_keeps_its_chunk() -> None:
    """A reader whose wait times out polls the same chunk again next time: after a
    timeout on an empty 2-chunk ring it still reads every message, in order.
    (Catches: reader-skips-ahead-on-timeout.)"""
    ring = ShmRingBuffer(1, 32, 2)
    rring = ShmRingBuffer.attach(ring.handle())
    try:
        w, r = ring.writer(), rring.reader(0)
        with pytest.raises(RingTimeoutError, match="on chunk 0"):
            _read(r, timeout=0)
        for lap in range(2):
            _write(w, b"a%d" % lap)
            _write(w, b"b%d" % lap)
            assert [_read(r), _read(r)] == [b"a%d" % lap, b"b%d" % lap]
    finally:
        rring.close()
        ring.close()


# --- the queue: flags of local readers -------------------------------------------------


def test_local_ranks_in_any_order_use_their_positions(queues: Make) -> None:
    """local_reader_ranks=[1, 0]: rank 1 owns read flag 0 and rank 0 owns flag 1 (their
    positions in the list), and the writer's stall names the rank that lags.
    (Catches: flag-index-is-global-rank, which keeps every index in range here.)"""
    w, (r1, r0) = queues([1, 0])
    w.enqueue("a", timeout=T)
    w.enqueue("b", timeout=T)
    assert r1.dequeue(T) == "a"
    with pytest.raises(RingTimeoutError) as info:
        w.enqueue("c", timeout=0)
    msg = str(info.value)
    assert "local reader ranks [0] have not read" in msg  # rank 0 lags, not rank 1
    assert "saw written=1, read flags=[1, 0]" in msg  # position 0 is rank 1's flag
    assert [r0.dequeue(T), r0.dequeue(T)] == ["a", "b"]
    w.enqueue("c", timeout=T)
    assert [r1.dequeue(T), r1.dequeue(T), r0.dequeue(T)] == ["b", "c", "c"]


# --- the queue: overflow frames --------------------------------------------------------


def test_overflow_frame_follows_its_published_marker(queues: Make) -> None:
    """An overflow enqueue that times out on a full ring sends nothing: its retry
    sends the frame once, and the reader gets each object once, in order.
    (Catches: overflow-frame-before-marker, whose timed-out attempt already sent a
    frame, so the reader later takes that stale frame for the next marker.)"""
    w, (r,) = queues([0])
    w.enqueue(0, timeout=T)
    w.enqueue(1, timeout=T)  # both chunks hold unread messages
    with pytest.raises(RingTimeoutError, match=r"could not enqueue message seq 2"):
        w.enqueue(BIG, timeout=0)
    assert [r.dequeue(T), r.dequeue(T)] == [0, 1]
    big2 = b"C" * 60_000
    w.enqueue(BIG, timeout=T)
    w.enqueue(big2, timeout=T)
    assert [r.dequeue(T), r.dequeue(T)] == [BIG, big2]
    with pytest.raises(RingTimeoutError, match="seq 4"):
        r.dequeue(timeout=0)  # nothing else arrived
    w.enqueue("end", timeout=T)
    assert r.dequeue(T) == "end"


class _ArrivesDuringRingWait(CursorStandIn):
    """Stands in for a LocalReader's ring cursor to make one interleaving certain:
    the reader's first poll fails; on the second (inside its ring wait) the writer
    publishes an overflow marker and sends its frame, and the ring is reported
    empty until the reader has drained that frame from its socket. So the frame
    arrives, and is taken from the socket, while the reader waits on the ring."""

    def __init__(self, cursor: ReaderCursor, sock: zmq.Socket[Any], send: Callable[[], None]):
        super().__init__(cursor)
        self.sock = sock
        self.send: Callable[[], None] | None = send
        self.polls = 0

    def poll(self) -> bool:
        self.polls += 1
        if self.polls == 1:
            return False  # dequeue's own poll: it goes on to wait on the ring
        if self.send is not None:
            send, self.send = self.send, None
            send()
            assert self.sock.poll(int(T * 1000)), "the frame never reached the reader"
            return False
        if self.sock.poll(0):
            return False  # the reader has not looked at its socket yet
        return self.cursor.poll()


def test_frame_that_arrives_during_a_ring_wait_is_kept(queues: Make) -> None:
    """A frame the reader takes from its socket while it waits on the ring is kept
    (stashed) and returned for its marker. (Catches:
    frame-dropped-while-waiting-on-ring.)"""
    w, (r,) = queues([0])
    hook = _ArrivesDuringRingWait(
        reader_cursor(r), reader_socket(r), lambda: w.enqueue(BIG, timeout=T)
    )
    with replace_reader_cursor(r, hook):
        got = r.dequeue(3.0)  # the frame is in hand: no wait at all once the marker is seen
    assert hook.send is None and hook.polls >= 3  # the interleaving did happen
    assert got == BIG
    w.enqueue("next", timeout=T)
    assert r.dequeue(T) == "next"


# --- the queue: handshake -----------------------------------------------------------------


def test_ready_waits_for_remote_subscriptions_too() -> None:
    """With every local reader subscribed but the remote one missing, the writer's
    handshake times out naming it: READY waits for every subscription.
    (Catches: ready-before-every-subscription.)"""
    with MessageQueue(2, 1, [0], connect_ip=LOOPBACK) as w:
        h = w.export_handle()
        with MessageQueue.create_from_handle(h, 0):
            local, _ = writer_sockets(w)
            assert local is not None and local.poll(int(T * 1000))  # the subscription is queued
            with pytest.raises(RingTimeoutError, match="1 of 1 remote readers missing"):
                w.wait_until_ready(timeout=0.5)


# --- the queue: sequence numbers -------------------------------------------------------------


def test_ring_chunk_out_of_sequence_is_refused(queues: Make) -> None:
    """A ring chunk whose seq is not the next one is a lost message, never returned.
    (Catches: seq-check-removed-ring.)"""
    w, (r,) = queues([0])
    forge_chunk(w, 5, "intruder", T)  # as if messages 0..4 had been lost
    with pytest.raises(BrokenPeerError, match=r"on the ring got INLINE seq 5, expected .*seq 0"):
        r.dequeue(T)


def test_local_frame_out_of_sequence_is_refused(queues: Make) -> None:
    """An overflow frame whose seq is not its marker's is refused.
    (Catches: seq-check-removed-local-frame.)"""
    w, (r,) = queues([0])
    send_frame(w, "local", wire.frame_parts(1, Serializer().dumps("intruder")))
    w.enqueue(BIG, timeout=T)  # marker seq 0, then its frame, behind the stray one
    with pytest.raises(
        BrokenPeerError, match=r"on the local socket got OVERFLOW seq 1, expected .*seq 0"
    ):
        r.dequeue(T)


def test_remote_frame_out_of_sequence_is_refused(queues: Make) -> None:
    """An authentic remote frame whose seq is not the next one is refused.
    (Catches: seq-check-removed-remote.)"""
    w, (r,) = queues([], 1)
    parts = wire.frame_parts(3, Serializer().dumps("intruder"))
    send_frame(w, "remote", parts)  # authentic
    with pytest.raises(
        BrokenPeerError, match=r"on the remote socket got OVERFLOW seq 3, expected .*seq 0"
    ):
        r.dequeue(T)


# --- the queue: hellos -----------------------------------------------------------------------


def test_forged_hello_does_not_count_as_a_reader() -> None:
    """A subscription announcing local rank 1 under a tag made with another key is not
    reader 1: the handshake still times out naming rank 1. (Catches: hmac-skipped-hello.)"""
    with MessageQueue(2, 2, [0, 1]) as w:
        h = w.export_handle()
        assert h.local_subscribe_addr is not None
        with MessageQueue.create_from_handle(h, 0):
            ctx: zmq.Context[Any] = zmq.Context()
            sub = ctx.socket(zmq.SUB)
            try:
                sub.setsockopt(zmq.SUBSCRIBE, b"")
                sub.setsockopt(zmq.SUBSCRIBE, hello_topic(Signer(b"k" * 32), 1))
                sub.connect(h.local_subscribe_addr)
                with pytest.raises(RingTimeoutError, match=r"local ranks \[1\] missing"):
                    w.wait_until_ready(timeout=1.0)
            finally:
                sub.close(linger=0)
                ctx.term()


# --- the queue: high-water marks ----------------------------------------------------------------


def _never_reached(hwm: int, outstanding: int) -> bool:
    """libzmq counts a pipe's messages as queued until the reading side reports
    them, in batches of lwm = (hwm + 1) // 2: up to lwm - 1 read ones still count.
    The mark is never reached while ``outstanding`` (sent, not yet received by the
    application) plus those stays below it."""
    lwm = (hwm + 1) // 2
    return outstanding + (lwm - 1) < hwm


def test_socket_hwm_covers_the_window_with_batching(queues: Make) -> None:
    """Every socket's high-water mark holds the protocol's most outstanding messages
    (local: a ring's chunks plus one pending marker; remote: the credit window; each
    plus READY and SHUTDOWN) with libzmq's batching on top, so no frame is ever
    blocked or dropped at the mark. (Catches: hwm-too-small; no workload here can
    fill a pipe that far, because the kernel buffers and the reader's own pipe
    hold the excess.)"""
    max_chunks, window = 3, 16
    w, (local, remote) = queues([0], 1, max_chunks=max_chunks, remote_window=window)
    control = 2  # READY and SHUTDOWN
    local_xpub, remote_xpub = writer_sockets(w)
    pipes = [
        (local_xpub, zmq.SNDHWM, max_chunks + 1),
        (reader_socket(local), zmq.RCVHWM, max_chunks + 1),
        (remote_xpub, zmq.SNDHWM, window),
        (reader_socket(remote), zmq.RCVHWM, window),
    ]
    for sock, option, most in pipes:
        assert sock is not None
        hwm = sock.getsockopt(option)
        assert isinstance(hwm, int), (option, hwm)
        assert _never_reached(hwm, most + control), (option, hwm, most)
    w.enqueue(BIG, timeout=T)
    assert [local.dequeue(T), remote.dequeue(T)] == [BIG, BIG]
