"""A reader never consumes a message unreported, and a sequence mismatch breaks it for good.

A real signal lands inside a reader's unpickling: the object's reconstructor sends
SIGUSR1 to this process, and CPython runs the handler (which raises) at that
call's return, as a Ctrl-C there would. The message was consumed before it was
decoded; the interrupt propagates, and the next dequeue raises DecodeError for
that message (inline, overflow frame, remote frame). Before, the next dequeue
returned the message after it: ``['a', interrupt, 'c']``, 'b' lost unreported.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from support.signals import Interrupt, sigusr1  # noqa: F401 (a fixture, used by name)

from verifiedring import BrokenPeerError, DecodeError
from verifiedring.queue import LocalReader, QueueWriter, RemoteReader
from verifiedring.queue.lifecycle import ReaderState
from verifiedring.testing import faults

T = 10.0
LOOPBACK = "127.0.0.1"


def _signalled(value: Any) -> Any:
    """The reconstructor of :class:`Interrupting`: a real signal, then the value."""
    os.kill(os.getpid(), signal.SIGUSR1)  # the handler raises at this call's return
    return value


class Interrupting:
    """Unpickles as ``value``, interrupted by a real signal while it does."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:
        return (_signalled, (self.value,))


@pytest.fixture
def queue() -> Iterator[tuple[QueueWriter, LocalReader, RemoteReader]]:
    """A writer with local reader 0 and remote reader 1 (1 KiB chunks)."""
    w = QueueWriter(2, 1, [0], max_chunk_bytes=1024, max_chunks=4, connect_ip=LOOPBACK)
    h = w.export_handle()
    local, remote = LocalReader(h, 0), RemoteReader(h, 1)
    w.wait_until_ready(T)
    local.wait_until_ready(T)
    remote.wait_until_ready(T)
    yield w, local, remote
    for q in (local, remote, w):
        q.close()


@pytest.mark.parametrize("size", [10, 5000], ids=["inline", "overflow"])
@pytest.mark.usefixtures("sigusr1")
def test_an_interrupted_unpickling_is_reported_at_the_next_dequeue(
    queue: tuple[QueueWriter, LocalReader, RemoteReader], size: int
) -> None:
    w, local, remote = queue
    w.enqueue("a", timeout=T)
    w.enqueue(Interrupting("b" * size), timeout=T)
    w.enqueue("c", timeout=T)
    for r in (local, remote):
        assert r.dequeue(timeout=T) == "a"
        with pytest.raises(Interrupt):
            r.dequeue(timeout=T)
        with pytest.raises(DecodeError) as info:
            r.dequeue(timeout=T)
        assert info.value.seq == 1
        assert "its unpickling was interrupted by Interrupt" in str(info.value)
        assert f"reader rank {r.rank}" in str(info.value)
        assert r.dequeue(timeout=T) == "c"


def test_a_sequence_mismatch_breaks_the_reader_for_good(
    queue: tuple[QueueWriter, LocalReader, RemoteReader],
) -> None:
    """Before, the reader stayed ready: every later dequeue consumed the next message
    and raised a new mismatch."""
    w, local, remote = queue
    w.enqueue("a", timeout=T)
    faults.skip_to_seq(w, 5)  # a writer that skipped numbers (a defect)
    w.enqueue("b", timeout=T)
    w.enqueue("c", timeout=T)
    for r in (local, remote):
        assert r.dequeue(timeout=T) == "a"
        with pytest.raises(BrokenPeerError, match="seq 5, expected message seq 1") as first:
            r.dequeue(timeout=T)
        assert r.state is ReaderState.BROKEN
        with pytest.raises(BrokenPeerError) as again:
            r.dequeue(timeout=T)
        assert str(first.value.args[0]).split(": ", 1)[1] in str(again.value)


class _SignalledAcks:
    """A remote reader's ack socket whose next send is cut by a real signal."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.armed = True

    def send(self, data: bytes) -> None:
        if self.armed:
            self.armed = False
            os.kill(os.getpid(), signal.SIGUSR1)  # the handler raises at this call's return
        self.sock.send(data)

    def close(self, linger: int | None = None) -> None:
        self.sock.close(linger=linger)


@pytest.mark.usefixtures("sigusr1")
def test_an_interrupt_at_the_remote_acknowledgement_is_reported(
    queue: tuple[QueueWriter, LocalReader, RemoteReader],
) -> None:
    """The remote reader consumes a frame, then acknowledges it (nothing more queued):
    a signal there. Before, the next dequeue returned the message after it: 'b' was
    lost unreported."""
    w, _local, remote = queue
    w.enqueue("a", timeout=T)
    assert remote.dequeue(timeout=T) == "a"
    w.enqueue("b", timeout=T)
    acks = _SignalledAcks(remote._path._ack_sock)
    remote._path._ack_sock = acks  # type: ignore[assignment]  # a stand-in that signals
    wait_queued(remote)
    with pytest.raises(Interrupt):
        remote.dequeue(timeout=T)
    assert not acks.armed
    w.enqueue("c", timeout=T)
    with pytest.raises(DecodeError, match="its unpickling was interrupted by Interrupt"):
        remote.dequeue(timeout=T)
    assert remote.dequeue(timeout=T) == "c"


def wait_queued(r: RemoteReader) -> None:
    """Until the remote reader's socket holds a frame (so its dequeue takes it at once)."""
    assert r._path.socket.poll(int(T * 1000)), "no frame arrived"
