"""The writer's end as vLLM means it: shutdown() only flags, close() tells the readers,
teardown does not wait for what is already acknowledged, acquire_write is in place."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable

import pytest
from support.groups import LOOPBACK, Group, T

from verifiedring import BusyError, ClosedError, MessageQueue, RingTimeoutError
from verifiedring.queue import wire
from verifiedring.queue.lifecycle import WriterState
from verifiedring.testing import wait_blocked
from verifiedring.testing.faults import ring_chunk, writer_ring

CHUNKS = 4  # Group's ring: max_chunks=4
PAYLOAD = 4096 - wire.HEADER_BYTES  # Group's max_chunk_bytes=4096, less the header


def _fill(g: Group) -> int:
    """Enqueue until the writer's next enqueue has to wait (the ring is full, or the
    remote reader's window); how many were sent."""
    n = CHUNKS
    for i in range(n):
        g.writer.enqueue(i, timeout=T)
    return n


# --- shutdown() flags; close() tells -----------------------------------------------


@pytest.mark.parametrize("n_local,n_remote", [(1, 0), (0, 1)])
def test_shutdown_lets_a_blocked_enqueue_finish_and_a_later_one_arrive(
    group: Callable[..., Group], n_local: int, n_remote: int
) -> None:
    """vLLM's death monitor calls shutdown() while the output thread is inside
    enqueue: that enqueue completes, a later one is sent too; close() then sends
    SHUTDOWN and the reader raises ClosedError after the last message."""
    g = group(n_local, n_remote, remote_window=CHUNKS)
    w, (r,) = g.writer, g.readers
    sent = _fill(g)
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            w.enqueue("while shutting down", timeout=T)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=blocked)
    t.start()
    wait_blocked(t, T)  # inside its wait: for a free chunk, or the remote reader's credit
    w.shutdown()
    assert w.shutting_down is True
    assert w.state is WriterState.CHUNK
    got = [r.dequeue(timeout=T) for _ in range(sent + 1)]
    t.join(T)
    assert not t.is_alive() and errors == []
    assert got == [0, 1, 2, 3, "while shutting down"]
    w.enqueue("after shutdown", timeout=T)
    assert r.dequeue(timeout=T) == "after shutdown"
    w.shutdown()  # idempotent
    w.close()
    with pytest.raises(ClosedError, match="after 6 messages"):
        r.dequeue(timeout=T)


def test_shutdown_before_the_handshake_and_after_close_only_flags() -> None:
    """As vLLM's, shutdown() is a flag at any time: before wait_until_ready() and
    after close() too (vLLM's executor calls it, then drops the queue)."""
    w = MessageQueue(1, 1)
    w.shutdown()
    assert w.shutting_down is True and w.state is WriterState.HANDSHAKE
    w.close()
    w.shutdown()
    assert w.closed and w.shutting_down


# --- teardown: no wait for what is acknowledged or cannot be taken --------------------

FAR_BELOW_LINGER = 1.0  # seconds; the default linger is 5


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _timed_close(g: Group) -> float:
    t0 = time.monotonic()
    g.writer.close()
    return time.monotonic() - t0


def test_close_with_an_idle_remote_reader_that_read_everything_does_not_wait(
    group: Callable[..., Group], caplog: pytest.LogCaptureFixture
) -> None:
    """The reader took all 10 messages (fewer than an acknowledgement interval) and
    then does nothing: it acknowledged as it went idle, so close() has nothing to
    wait for (it waited the whole linger and warned before)."""
    g = group(0, 1)
    r = g.readers[0]
    for i in range(10):
        g.writer.enqueue(i, timeout=T)
    assert [r.dequeue(timeout=T) for _ in range(10)] == list(range(10))
    caplog.set_level(logging.WARNING, logger="verifiedring")
    assert _timed_close(g) < FAR_BELOW_LINGER
    assert _warnings(caplog) == []
    with pytest.raises(ClosedError, match="after 10 messages"):
        r.dequeue(timeout=T)


def test_dropping_a_writer_with_an_idle_remote_reader_does_not_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """vLLM's executor drops its queue (no close()): the finalizer's teardown is
    close()'s, as fast; the reader still learns the end."""
    w: MessageQueue | None = MessageQueue(1, 0, connect_ip=LOOPBACK)
    assert w is not None
    r = MessageQueue.create_from_handle(w.export_handle(), 1)
    try:
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        w.enqueue("only", timeout=T)
        assert r.dequeue(timeout=T) == "only"
        caplog.set_level(logging.WARNING, logger="verifiedring")
        t0 = time.monotonic()
        w = None
        gc.collect()
        assert time.monotonic() - t0 < FAR_BELOW_LINGER
        assert _warnings(caplog) == []
        with pytest.raises(ClosedError, match="after 1 messages"):
            r.dequeue(timeout=T)
    finally:
        r.close()


def test_close_after_the_remote_reader_left_short_does_not_wait(
    group: Callable[..., Group], caplog: pytest.LogCaptureFixture
) -> None:
    """A reader gone (its connection closed) after 3 of 10 messages can take no more:
    close() returns once the writer sees it leave, without a warning."""
    g = group(0, 1)
    r = g.readers[0]
    for i in range(10):
        g.writer.enqueue(i, timeout=T)
    assert [r.dequeue(timeout=T) for _ in range(3)] == [0, 1, 2]
    r.close()
    caplog.set_level(logging.WARNING, logger="verifiedring")
    assert _timed_close(g) < FAR_BELOW_LINGER
    assert _warnings(caplog) == []


def test_close_with_no_message_sent_does_not_wait(
    group: Callable[..., Group], caplog: pytest.LogCaptureFixture
) -> None:
    g = group(1, 1)
    caplog.set_level(logging.WARNING, logger="verifiedring")
    assert _timed_close(g) < FAR_BELOW_LINGER
    assert _warnings(caplog) == []


def test_close_still_waits_its_linger_for_a_live_reader_short_of_messages(
    group: Callable[..., Group], caplog: pytest.LogCaptureFixture
) -> None:
    """A reader still there that has not taken its messages can still take them:
    close() waits the linger for it, then warns naming it and its count."""
    g = group(0, 1, linger=0.3)
    for i in range(10):
        g.writer.enqueue(i, timeout=T)
    caplog.set_level(logging.WARNING, logger="verifiedring")
    assert _timed_close(g) >= 0.3
    (warning,) = _warnings(caplog)
    assert "remote readers {1: 0}" in warning and "short of all 10 messages" in warning
    assert [g.readers[0].dequeue(timeout=T) for _ in range(10)] == list(range(10))


# --- acquire_write: the chunk in place ------------------------------------------------


def test_acquire_write_times_out_before_its_body_runs(group: Callable[..., Group]) -> None:
    """vLLM's: the chunk is waited for first, so a full ring is a TimeoutError and the
    body never runs; nothing is published and the next message takes seq 4."""
    g = group(1, 0)
    w, (r,) = g.writer, g.readers
    _fill(g)
    ran: list[int] = []
    with (
        pytest.raises(RingTimeoutError, match=r"could not enqueue message seq 4") as info,
        w.acquire_write(timeout=0.05),
    ):
        ran.append(1)
    assert isinstance(info.value, TimeoutError) and ran == []
    assert [r.dequeue(timeout=T) for _ in range(CHUNKS)] == [0, 1, 2, 3]
    w.enqueue("next", timeout=T)
    assert r.dequeue(timeout=T) == "next"


def test_acquire_write_fills_the_claimed_chunk_in_place_and_publishes_on_exit(
    group: Callable[..., Group],
) -> None:
    """The body writes the ring chunk itself (it is claimed, not yet published, while
    the body runs); on exit the header says RAW and the sequence number, and the local
    reader gets the chunk's payload, the remote reader the same bytes as a frame."""
    g = group(1, 1)
    w, (local, remote) = g.writer, g.readers
    w.enqueue("first", timeout=T)
    with w.acquire_write(timeout=T) as buf:
        assert len(buf) == PAYLOAD
        buf[0] = 123
        buf[1:4] = b"abc"
        buf[PAYLOAD - 1] = 7
        assert ring_chunk(w, 1)[0] == 0  # claimed: not written yet
        data = writer_ring(w).views.data[1]
        assert bytes(data[wire.HEADER_BYTES : wire.HEADER_BYTES + 4]) == b"\x7babc"
    assert ring_chunk(w, 1) == (1, wire.RAW, 1)
    for r in (local, remote):
        assert r.dequeue(timeout=T) == "first"
        got = r.dequeue(timeout=T)
        assert type(got) is bytes and len(got) == PAYLOAD
        assert got[:4] == b"\x7babc" and got[-1] == 7
    w.enqueue("after", timeout=T)
    assert [local.dequeue(timeout=T), remote.dequeue(timeout=T)] == ["after", "after"]


@pytest.mark.parametrize("n_local,n_remote", [(1, 0), (1, 1), (0, 1)])
def test_acquire_write_whose_body_raises_publishes_nothing(
    group: Callable[..., Group], n_local: int, n_remote: int
) -> None:
    """A body that raises is an abort: no chunk is published, no frame sent, and the
    sequence number is not used (the next message is seq 0 for every reader)."""
    g = group(n_local, n_remote)
    w = g.writer
    with pytest.raises(ValueError, match="body failed"), w.acquire_write(timeout=T) as buf:
        buf[0] = 1
        raise ValueError("body failed")
    if n_local:
        assert ring_chunk(w, 0)[0] == 0
    for r in g.readers:
        with pytest.raises(RingTimeoutError):
            r.dequeue(timeout=0.05)
    w.enqueue("next", timeout=T)
    assert [r.dequeue(timeout=T) for r in g.readers] == ["next"] * len(g.readers)


def test_acquire_write_with_remote_readers_only_sends_a_zeroed_scratch_buffer(
    group: Callable[..., Group],
) -> None:
    g = group(0, 1)
    w, (r,) = g.writer, g.readers
    with w.acquire_write(timeout=T) as buf:
        assert len(buf) == PAYLOAD and not any(buf)
        buf[0] = 123
    assert r.dequeue(timeout=T) == b"\x7b" + bytes(PAYLOAD - 1)


def test_enqueue_inside_an_acquire_write_body_is_refused(group: Callable[..., Group]) -> None:
    """The chunk is held while the body runs: a nested enqueue (or acquire_write) on
    the same writer raises BusyError instead of claiming behind it; the outer message
    is still published, as seq 0."""
    g = group(1, 0)
    w, (r,) = g.writer, g.readers
    with w.acquire_write(timeout=T) as buf:
        buf[0] = 5
        with pytest.raises(BusyError, match=r"enqueue\(\) called while another thread"):
            w.enqueue("nested", timeout=T)
        with pytest.raises(BusyError, match=r"acquire_write\(\) called"), w.acquire_write(T):
            pass
    got = r.dequeue(timeout=T)
    assert got[0] == 5 and len(got) == PAYLOAD
    w.enqueue("next", timeout=T)
    assert r.dequeue(timeout=T) == "next"
