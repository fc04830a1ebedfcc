"""A real signal right after the writer's publish store: the message is out, its
sequence number is never reused, and nothing is lost or reported twice.

CPython runs a Python signal handler at its next check for pending calls; the
first call after ``WriterCursor.publish``'s WriterPublish store is
``wake_sleepers``. ``interrupt_at`` sends SIGUSR1 to this process at the start of
that call, and the handler's exception lands there (the spec's
``WriterInterruptedAfterPublish``), as a Ctrl-C at that instant would.

Before the fix the sequence number was not advanced: the next enqueue reused it,
the reader took the published message and then raised for the next one (seq 2
where 3 was due); mid-run the due ABORT carried a stale part and broke the
reader; after a run's LAST the next message reused its number.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest
from support.signals import Interrupt, InterruptBefore

from verifiedring import BrokenPeerError, MessageAbortedError, MessageQueue, RingTimeoutError
from verifiedring.queue import LocalReader, QueueWriter, RemoteReader
from verifiedring.queue.wire import (
    HEADER_BYTES,
    INLINE,
    RAW,
    RUN_FIRST,
    RUN_LAST,
    RUN_MORE,
    read_header,
)
from verifiedring.steps import WRITER_PUBLISH
from verifiedring.testing.faults import observe_cursor

T = 10.0
LOOPBACK = "127.0.0.1"
BIG = 20_000  # a run of several 4 KiB chunks (large_objects="stream")


class _Interrupt(BaseException):
    """What the signal handler raises (KeyboardInterrupt's place)."""


@contextlib.contextmanager
def interrupt_at(
    writer: QueueWriter, kind: int | None = None, steps: str = "python"
) -> Iterator[list[int]]:
    """SIGUSR1 to this process right after the first publish store of ``writer``'s ring
    (of a chunk of ``kind``, if given); the handler raises :class:`_Interrupt`. Yields
    the kinds of the chunks published so far. ``steps``: ``"python"``, the Python steps
    (the signal at the start of the wake-up after the store), or ``"native"``, the native
    step (:mod:`verifiedring.native`: the signal at the return of its one call, the first
    point after its store where CPython can deliver one)."""
    local = writer._local
    assert local is not None
    cursor = local.cursor
    seen: list[int] = []

    def published(chunk: int) -> None:
        got = read_header(cursor._data[chunk])[0]
        seen.append(got)
        if (kind is None or got == kind) and seen.count(got) == 1:
            os.kill(os.getpid(), signal.SIGUSR1)  # handled at this call's return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Interrupt

    native = local._native_publish
    real = cursor.wake_sleepers
    if steps == "native":
        assert native is not None, "the native step core is not built"

        def publish(owner: Any, seq: int, stream: bytes, stored: int) -> bool:
            chunk = cursor.index
            done = native(owner, seq, stream, stored)
            if done:
                published(chunk)
            return done

        local._native_publish = publish
    else:
        local._native_publish = None

        def wake(chunk: int) -> None:
            published(chunk)
            real(chunk)

        cursor.wake_sleepers = wake  # type: ignore[method-assign]  # a stand-in, restored below
    old = signal.signal(signal.SIGUSR1, handler)
    try:
        yield seen
    finally:
        if steps != "native":
            del cursor.wake_sleepers
        local._native_publish = native
        signal.signal(signal.SIGUSR1, old)


def _queue(n_remote: int, **kw: Any) -> tuple[QueueWriter, list[LocalReader | RemoteReader]]:
    """A writer, local reader 0 (and remote reader 1); 8 chunks of 4 KiB: a run of
    BIG bytes fits the ring whole, so one thread writes it before it reads."""
    w = QueueWriter(1 + n_remote, 1, [0], max_chunk_bytes=4096, max_chunks=8,
                     connect_ip=LOOPBACK if n_remote else None, **kw)
    h = w.export_handle()
    readers: list[LocalReader | RemoteReader] = [LocalReader(h, 0)]
    readers += [RemoteReader(h, r) for r in range(1, 1 + n_remote)]
    w.wait_until_ready(T)
    for r in readers:
        r.wait_until_ready(T)
    return w, readers


@pytest.fixture
def made() -> Iterator[list[MessageQueue]]:
    queues: list[MessageQueue] = []
    yield queues
    for q in queues:
        q.close()


def _drain(r: MessageQueue) -> list[Any]:
    got: list[Any] = []
    with contextlib.suppress(RingTimeoutError):
        while True:
            got.append(r.dequeue(timeout=0.2))
    return got


@pytest.mark.parametrize(("in_place", "steps"), [(False, "python"), (False, "native"),
                                             (True, "python")],
                         ids=["enqueue", "enqueue-native", "acquire_write"])
def test_an_interrupt_after_the_publish_store_uses_up_the_sequence_number(
    made: list[MessageQueue], in_place: bool, steps: str
) -> None:
    w, (r,) = _queue(0)
    made += [w, r]
    w.enqueue("m0", timeout=T)
    w.enqueue("m1", timeout=T)
    with interrupt_at(w, steps=steps) as kinds, pytest.raises(_Interrupt):
        if in_place:
            with w.acquire_write(T) as buf:
                buf[:2] = b"m2"
        else:
            w.enqueue("m2", timeout=T)
    assert kinds == [RAW if in_place else INLINE]
    w.enqueue("m3", timeout=T)  # seq 3: 2 is out, and the writer is not broken
    m2 = b"m2" + bytes(4096 - HEADER_BYTES - 2) if in_place else "m2"
    assert _drain(r) == ["m0", "m1", m2, "m3"]


@pytest.mark.parametrize("steps", ["python", "native"])
def test_with_frames_still_due_the_interrupt_breaks_the_writer_and_both_readers_learn(
    made: list[MessageQueue], steps: str
) -> None:
    w, (local, remote) = _queue(1)
    made += [w, local, remote]
    w.enqueue("m0", timeout=T)
    with interrupt_at(w, steps=steps), pytest.raises(_Interrupt):
        w.enqueue("m1", timeout=T)  # in the ring; its remote frame never sent
    with pytest.raises(BrokenPeerError, match="publishing message seq 1 was interrupted"):
        w.enqueue("m2", timeout=T)
    for r, want in ((local, ["m0", "m1"]), (remote, ["m0"])):
        assert [r.dequeue(timeout=T) for _ in want] == want
        with pytest.raises(BrokenPeerError, match="broke for good after sending 1 messages"):
            r.dequeue(timeout=T)


def test_an_interrupt_after_a_run_chunk_s_store_moves_the_run_past_it(
    made: list[MessageQueue],
) -> None:
    w, (r,) = _queue(0, large_objects="stream")
    made += [w, r]
    w.enqueue("m0", timeout=T)
    big = bytes(range(256)) * (BIG // 256)
    with interrupt_at(w, RUN_MORE), pytest.raises(_Interrupt):  # at the MORE, part 1
        w.enqueue(big, timeout=T)
    w.enqueue("m2", timeout=T)  # first the run's due ABORT, as part 2
    assert r.dequeue(timeout=T) == "m0"
    with pytest.raises(MessageAbortedError) as info:
        r.dequeue(timeout=T)
    assert info.value.seq == 1 and info.value.part == 2
    assert _drain(r) == ["m2"]


def test_an_interrupt_after_a_run_s_last_store_sends_the_message(
    made: list[MessageQueue],
) -> None:
    w, (r,) = _queue(0, large_objects="stream")
    made += [w, r]
    big = bytes(range(256)) * (BIG // 256)
    with interrupt_at(w, RUN_LAST) as kinds, pytest.raises(_Interrupt):
        w.enqueue(big, timeout=T)
    assert kinds[0] == RUN_FIRST and kinds[-1] == RUN_LAST
    w.enqueue("after", timeout=T)
    assert _drain(r) == [big, "after"]


@pytest.mark.parametrize("how", ["enqueue", "stream", "acquire_write"])
def test_an_interrupt_before_the_publish_store_leaves_the_sequence_number_unused(
    made: list[MessageQueue], how: str
) -> None:
    """Interrupted before WriterPublish's store (``WriterAbort`` in ``"publish"``):
    nothing of the message is out, the chunk is claimed again and the next message
    takes its number; the writer goes on."""
    w, (r,) = _queue(0, **({"large_objects": "stream"} if how == "stream" else {}))
    made += [w, r]
    w.enqueue("m0", timeout=T)
    interrupt = InterruptBefore(WRITER_PUBLISH)
    observe_cursor(w, interrupt)
    interrupt.armed = True
    with pytest.raises(Interrupt):
        if how == "acquire_write":
            with w.acquire_write(T) as buf:
                buf[:2] = b"m1"
        else:
            w.enqueue("m1", timeout=T)
    w.enqueue("m2", timeout=T)  # seq 1, in chunk 1
    assert _drain(r) == ["m0", "m2"]


def test_an_in_place_publish_interrupted_with_its_remote_frame_due_breaks_the_writer(
    made: list[MessageQueue],
) -> None:
    w, (local, remote) = _queue(1)
    made += [w, local, remote]
    w.enqueue("m0", timeout=T)
    with interrupt_at(w), pytest.raises(_Interrupt), w.acquire_write(T) as buf:
        buf[:2] = b"m1"  # in the ring; its remote frame never sent
    with pytest.raises(BrokenPeerError) as info:
        w.enqueue("m2", timeout=T)
    assert str(info.value) == (
        f"writer (pid {os.getpid()}): broken since publishing message seq 1 was "
        "interrupted (_Interrupt) after its publish store"
    )
    payload = b"m1" + bytes(4096 - HEADER_BYTES - 2)
    for r, want in ((local, ["m0", payload]), (remote, ["m0"])):
        assert [r.dequeue(timeout=T) for _ in want] == want
        with pytest.raises(BrokenPeerError, match="broke for good after sending 1 messages"):
            r.dequeue(timeout=T)
