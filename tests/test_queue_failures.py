"""Failure paths are protocol: a decode failure, a failed send, a caller-owned buffer.

Each test reproduces a defect found in review: it failed on the code before the fix.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from verifiedring import (
    BrokenPeerError,
    ClosedError,
    DecodeError,
    MessageQueue,
    RingTimeoutError,
)
from verifiedring.queue import LocalReader, QueueWriter, RemoteReader
from verifiedring.testing.faults import wedge_local_socket

T = 10.0
LOOPBACK = "127.0.0.1"
Reader = LocalReader | RemoteReader


def _explode(reason: str) -> Any:
    raise RuntimeError(reason)


class Unloadable:
    """Pickles fine; unpickling it raises (as a class missing on the reader would)."""

    def __init__(self, reason: str, pad: int = 0) -> None:
        self.reason = reason
        self.pad = b"p" * pad

    def __reduce__(self) -> tuple[Any, ...]:
        return (_explode, (self.reason,), {"pad": self.pad})


@pytest.fixture
def queues() -> Iterator[Callable[..., tuple[QueueWriter, list[Reader]]]]:
    made: list[MessageQueue] = []

    def make(n_local: int, n_remote: int, **kw: Any) -> tuple[QueueWriter, list[Reader]]:
        kw.setdefault("max_chunk_bytes", 4096)
        kw.setdefault("max_chunks", 4)
        w = QueueWriter(
            n_local + n_remote, n_local, list(range(n_local)),
            connect_ip=LOOPBACK if n_remote else None, **kw,
        )
        h = w.export_handle()
        readers: list[Reader] = [LocalReader(h, r) for r in range(n_local)]
        readers += [RemoteReader(h, r) for r in range(n_local, n_local + n_remote)]
        made.extend([w, *readers])
        w.wait_until_ready(T)
        for r in readers:
            r.wait_until_ready(T)
        return w, readers

    yield make
    for q in made:
        q.close()


@pytest.mark.parametrize("pad", [0, 10_000], ids=["inline", "overflow"])
def test_a_message_that_does_not_unpickle_is_consumed_on_every_path(
    queues: Callable[..., tuple[QueueWriter, list[Reader]]], pad: int
) -> None:
    w, readers = queues(1, 1)
    w.enqueue(("before", 0), timeout=T)
    w.enqueue(Unloadable("no such class here", pad), timeout=T)
    w.enqueue(("after", 2), timeout=T)
    for r in readers:  # the local reader (ring or overflow frame) and the remote reader
        assert r.dequeue(timeout=T) == ("before", 0)
        with pytest.raises(DecodeError) as info:
            r.dequeue(timeout=T)
        err = info.value
        assert err.seq == 1
        assert isinstance(err.cause, RuntimeError) and str(err.cause) == "no such class here"
        msg = str(err)
        assert "message seq 1" in msg and "could not be unpickled" in msg
        assert f"reader rank {r.rank}" in msg and "_explode" in msg
        assert r.dequeue(timeout=T) == ("after", 2)  # the next message, not "lost or reordered"
    w.enqueue("and on", timeout=T)
    assert [r.dequeue(timeout=T) for r in readers] == ["and on", "and on"]


def test_a_send_failing_after_publish_breaks_the_writer_for_good(
    queues: Callable[..., tuple[QueueWriter, list[Reader]]],
) -> None:
    w, (r,) = queues(1, 0)
    w.enqueue("zero", timeout=T)
    with wedge_local_socket(w), pytest.raises(
        BrokenPeerError, match="overflow frame seq 1 could not be queued"
    ):
        w.enqueue(b"B" * 50_000, timeout=T)  # its marker is already in the ring
    for _ in range(2):  # never again reuses seq 1 for another object
        with pytest.raises(BrokenPeerError, match="broken since sending overflow frame seq 1"):
            w.enqueue("two", timeout=T)
    assert r.dequeue(timeout=T) == "zero"
    with pytest.raises(RingTimeoutError, match="overflow frame seq 1"):
        r.dequeue(timeout=0.2)  # the marker was published; its frame never comes


def test_read_only_buffers_are_copied_before_enqueue_returns(
    queues: Callable[..., tuple[QueueWriter, list[Reader]]],
) -> None:
    """A read-only view of memory the caller changes right after enqueue: readers of
    the overflow frame and the remote frame get the bytes as they were at enqueue
    (before the fix: the changed tail, and the remote frame's MAC failed)."""
    w, readers = queues(1, 1)
    base = np.arange(1 << 20, dtype=np.int64)  # 8 MiB: far more than a socket buffer holds
    view = base.view()
    view.setflags(write=False)
    w.enqueue({"arr": view}, timeout=T)
    base[:] = -1  # the caller reuses its memory at once
    for r in readers:
        got = r.dequeue(timeout=T)
        assert np.array_equal(got["arr"], np.arange(1 << 20, dtype=np.int64))


class _Interrupt(BaseException):
    """Stands in for KeyboardInterrupt delivered at a call."""


def test_an_interrupt_at_the_release_fence_still_releases(
    queues: Callable[..., tuple[QueueWriter, list[Reader]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CPython delivers an asynchronous exception at a call; the reader's release follows
    the FR2 fence call, so one landing there must not skip the release (before the fix:
    the same message was read twice). The message it cut is delivered once, by the next
    dequeue (before: consumed and never returned)."""
    from verifiedring import cursors, ordering

    w, (r,) = queues(1, 0)
    for i in range(3):
        w.enqueue(i, timeout=T)
    real, calls = ordering.fence, []  # the fence cursors.py calls

    def interrupted_fence() -> None:
        real()
        calls.append(1)
        if len(calls) == 3:  # the reader's FR0, FR1, then FR2: interrupt it
            raise _Interrupt

    monkeypatch.setattr(cursors, "fence", interrupted_fence)
    with pytest.raises(_Interrupt):
        r.dequeue(timeout=T)
    monkeypatch.setattr(cursors, "fence", real)
    assert [r.dequeue(timeout=T) for _ in range(3)] == [0, 1, 2]  # 0 once, by the retry


def test_an_interrupt_after_publish_breaks_the_writer(
    queues: Callable[..., tuple[QueueWriter, list[Reader]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from verifiedring.queue import transmitters

    w, (r, _remote) = queues(1, 1)

    def interrupted(*args: Any) -> None:
        raise _Interrupt

    monkeypatch.setattr(transmitters, "send_frames", interrupted)
    with pytest.raises(_Interrupt):
        w.enqueue("published, never sent remotely", timeout=T)
    monkeypatch.undo()
    with pytest.raises(BrokenPeerError, match="sending message seq 0 was interrupted"):
        w.enqueue("next", timeout=T)
    assert r.dequeue(timeout=T) == "published, never sent remotely"  # the ring has it


def test_a_reader_polling_with_timeout_zero_sees_shutdown(
    queues: Callable[..., tuple[QueueWriter, list[Reader]]],
) -> None:
    """dequeue(timeout=0) in a loop once drained the socket never: SHUTDOWN went
    unseen and the poller timed out forever instead of raising ClosedError."""
    w, (r,) = queues(1, 0)
    w.enqueue("only", timeout=T)
    w.close()
    assert r.dequeue(timeout=0) == "only"
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        try:
            r.dequeue(timeout=0)
        except RingTimeoutError:
            time.sleep(0.01)  # SHUTDOWN may still be in flight on the ipc socket
            continue
        except ClosedError as exc:
            assert "shut the queue down after 1 messages" in str(exc)
            break
        raise AssertionError("dequeue returned a message after the last one")
    else:
        raise AssertionError(f"no ClosedError within {T} s of polling with timeout=0")


def test_a_waiting_dequeue_looks_at_its_socket_once_per_slice_not_per_call(
    queues: Callable[..., tuple[QueueWriter, list[Reader]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each dequeue that had to wait once drained the socket and checked the writer's
    pid (/proc) first: ~90 us per message in a ping-pong (10x the floor ring). Waiting
    dequeues look every SLICE; only a timeout=0 poll looks every call."""
    from verifiedring.queue import sockets
    from verifiedring.queue.flavors import control

    w, (r,) = queues(1, 0)
    looks = []
    real = sockets.pending_frames  # the one control.py calls

    def counted(sock: Any) -> Any:
        looks.append(1)
        return real(sock)

    monkeypatch.setattr(control, "pending_frames", counted)
    started = time.monotonic()
    for _ in range(40):
        with pytest.raises(RingTimeoutError):
            r.dequeue(timeout=0.001)
    slices = (time.monotonic() - started) / control.SLICE  # one look each is due
    assert len(looks) <= 2 + slices, f"{len(looks)} looks in 40 short waits, {slices:.1f} SLICEs"
    looks.clear()
    w.close()
    for _ in range(50):  # a timeout=0 poller still sees SHUTDOWN promptly
        try:
            r.dequeue(timeout=0)
        except ClosedError:
            break
        except RingTimeoutError:
            time.sleep(0.01)
    else:
        raise AssertionError("a timeout=0 poller never saw SHUTDOWN")
    assert looks  # ... because each such poll looked
