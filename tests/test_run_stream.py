"""Large objects streamed through the ring (``large_objects="stream"``): exact delivery
of objects larger than a chunk and than the whole ring, the failure paths of a run
(pickling raises mid-run, unpickling raises mid-run, interrupts on either side), remote
readers beside it, and the writer's memory bound."""

from __future__ import annotations

import contextlib
import gc
import pickle
import threading
import tracemalloc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from support.groups import Group
from support.unpicklable import FailsToLoad, Unpicklable

from verifiedring import (
    BrokenPeerError,
    CancelledError,
    ClosedError,
    DecodeError,
    MessageAbortedError,
    MessageQueue,
    MisuseError,
    RingTimeoutError,
    VerifiedRingError,
)
from verifiedring.queue import QueueWriter, wire
from verifiedring.queue.transmitters import RemoteTransmitter
from verifiedring.testing import wait_blocked
from verifiedring.testing.faults import interrupt_writer_wait, run_holds_object, writer_run
from verifiedring.testing.launcher import Supervisor, Task, raise_for

T = 20.0
#: How long an exchange may take in all (each takes well under a second); a reader
#: left mid-run by a broken writer waits without a deadline, so this ends the test.
JOIN = 8.0
CHUNK = 4096
CHUNKS = 4  # the ring holds 16 KiB: most objects below are larger than the whole ring


@pytest.fixture
def stream_group() -> Iterator[Callable[..., Group]]:
    made: list[Group] = []

    def make(n_local: int = 1, n_remote: int = 0, **kw: Any) -> Group:
        kw.setdefault("large_objects", "stream")
        g = Group(n_local, n_remote, max_chunk_bytes=CHUNK, max_chunks=CHUNKS, **kw)
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and pickle.dumps(a) == pickle.dumps(b)


def _objects() -> list[Any]:
    return [
        ("small", 1),
        (b"x" * 100_000, "bytes nested in a tuple"),
        np.arange(50_000, dtype=np.int64),  # out of band while it fits, else in band
        list(range(20_000)),
        b"y" * 300_000,  # a top-level bytes: out of band
        {"a": np.ones((64, 64)), "b": "text" * 5000},
        "x" * (CHUNK - 200),  # just fits one chunk: INLINE
        "tail",
    ]


def _exchange(g: Group, send: Callable[[], None], n: int) -> list[list[Any]]:
    """Run ``send`` in a thread while every reader dequeues ``n`` results (objects or
    the exceptions dequeue raised), in order."""
    got: list[list[Any]] = [[] for _ in g.readers]

    def read(i: int) -> None:
        for _ in range(n):
            try:
                got[i].append(g.readers[i].dequeue(timeout=T))
            except DecodeError as exc:
                got[i].append(exc)
            except VerifiedRingError as exc:  # anything else ends this reader's run
                got[i].append(exc)
                return

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(g.readers))]
    writer = threading.Thread(target=send, name="writer")
    for t in [writer, *threads]:
        t.start()
    for t in [writer, *threads]:
        t.join(JOIN)
        assert not t.is_alive(), f"{t.name} still running after {JOIN} s"
    return got


@pytest.mark.parametrize(("n_local", "n_remote"), [(2, 0), (1, 1)], ids=["2-local", "remote"])
def test_objects_larger_than_the_ring_arrive_whole_in_order(
    stream_group: Callable[..., Group], n_local: int, n_remote: int
) -> None:
    """Local readers get them as runs; a remote reader, as frames, the same objects."""
    g = stream_group(n_local, n_remote)
    objs = _objects()

    def send() -> None:
        for o in objs:
            g.writer.enqueue(o, timeout=T)

    got = _exchange(g, send, len(objs))
    for per_reader in got:
        assert len(per_reader) == len(objs)
        for sent, received in zip(objs, per_reader, strict=True):
            assert _same(sent, received)


def test_pickling_that_raises_mid_run_aborts_that_message_only(
    stream_group: Callable[..., Group],
) -> None:
    g = stream_group(2)
    errors: list[BaseException] = []

    def send() -> None:
        g.writer.enqueue(("before", b"a" * 50_000), timeout=T)
        try:  # 100 KB (written as itself, past the pickler's 64 KiB frame) published
            # in chunks before the pickler reaches the bad object
            g.writer.enqueue([b"b" * 100_000, Unpicklable()], timeout=T)
        except MisuseError as exc:
            errors.append(exc)
        g.writer.enqueue(("after", b"c" * 50_000), timeout=T)

    got = _exchange(g, send, 3)
    assert len(errors) == 1 and "aborted" in str(errors[0]) and "seq 1" in str(errors[0])
    for per_reader in got:
        assert per_reader[0] == ("before", b"a" * 50_000)
        assert isinstance(per_reader[1], MessageAbortedError) and per_reader[1].seq == 1
        assert "refuses to be pickled" in str(per_reader[1])
        assert per_reader[2] == ("after", b"c" * 50_000)


def test_unpickling_that_raises_mid_run_skips_to_the_runs_end(
    stream_group: Callable[..., Group],
) -> None:
    g = stream_group(1)
    # q is larger than a pickle frame (64 KiB): the unpickler runs FailsToLoad's reduce
    # after the first frame, with q's chunks still to come (at the LAST chunk, a reader
    # that stopped reading the run would go unnoticed)
    objs = [[b"p" * 30_000, FailsToLoad(), b"q" * 200_000], "next", [b"r" * 40_000]]

    def send() -> None:
        for o in objs:
            g.writer.enqueue(o, timeout=T)

    (got,) = _exchange(g, send, 3)
    assert isinstance(got[0], DecodeError) and not isinstance(got[0], MessageAbortedError)
    assert got[0].seq == 0 and "refuses to be rebuilt" in str(got[0])
    assert got[1:] == ["next", [b"r" * 40_000]]


class _InterruptsPickling:
    def __reduce__(self) -> Any:
        raise KeyboardInterrupt


def test_a_writer_interrupted_mid_pickling_aborts_the_run_at_once(
    stream_group: Callable[..., Group],
) -> None:
    """The interrupt lands while the run holds a chunk: ABORT goes in it before the
    exception leaves enqueue, so readers are not left mid-run while the writer's
    caller does something else."""
    g = stream_group(1)
    left = threading.Event()

    def send() -> None:
        with pytest.raises(KeyboardInterrupt):
            g.writer.enqueue([b"i" * 100_000, _InterruptsPickling()], timeout=T)
        left.set()

    (got,) = _exchange(g, send, 1)
    assert left.is_set()
    assert isinstance(got[0], MessageAbortedError) and got[0].seq == 0
    assert "the writer was interrupted (KeyboardInterrupt)" in str(got[0])
    g.writer.enqueue("next", timeout=T)
    assert g.readers[0].dequeue(timeout=T) == "next"


def _interrupt_while_waiting_for_room(writer: Any) -> None:
    """Enqueue 100 KB (25 chunks) while no reader reads: KeyboardInterrupt lands in the
    writer's wait for room after the run's first chunks, leaving the run unfinished."""
    interrupted = threading.Event()
    run = writer_run(writer)

    def mid_run() -> bool:
        if run.part > 0:
            interrupted.set()
        return interrupted.is_set()

    with interrupt_writer_wait(writer, mid_run), pytest.raises(KeyboardInterrupt):
        writer.enqueue(b"w" * 100_000, timeout=T)  # blocks after 4 chunks
    assert interrupted.is_set() and run.active


def test_a_run_interrupted_while_waiting_for_room_aborts_for_remote_readers_too(
    stream_group: Callable[..., Group],
) -> None:
    """Remote readers need the whole pickle, so nothing can fail mid-pickling; the run
    can still be interrupted mid-way (here: while it waits for room, the readers not
    reading yet). The remote reader then gets an ABORT frame for that message."""
    g = stream_group(1, 1)
    writer = g.writer
    _interrupt_while_waiting_for_room(writer)

    got = _exchange(g, lambda: writer.enqueue("next", timeout=T), 2)
    for per_reader in got:
        assert isinstance(per_reader[0], MessageAbortedError) and per_reader[0].seq == 0
        assert "interrupted" in str(per_reader[0])
        assert per_reader[1] == "next"


def test_a_writer_interrupted_sending_an_abort_frame_is_broken_saying_so(
    stream_group: Callable[..., Group], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ABORT chunk is published, its remote frame not sent: seq 0 is out, so the
    writer refuses from then on, naming the interrupted abort."""
    g = stream_group(1, 1)
    writer = g.writer
    _interrupt_while_waiting_for_room(writer)
    send = RemoteTransmitter.send

    def interrupted_abort(self: RemoteTransmitter, parts: list[Any], *rest: Any) -> None:
        if wire.read_header(parts[0])[0] == wire.RUN_ABORT:
            raise KeyboardInterrupt
        send(self, parts, *rest)

    monkeypatch.setattr(RemoteTransmitter, "send", interrupted_abort)
    got: list[BaseException] = []

    def read() -> None:
        try:
            g.readers[0].dequeue(timeout=T)
        except VerifiedRingError as exc:
            got.append(exc)

    reader = threading.Thread(target=read)  # makes room for the ABORT chunk
    reader.start()
    with pytest.raises(KeyboardInterrupt):
        writer.enqueue("next", timeout=T)  # the due abort first
    reader.join(JOIN)
    assert isinstance(got[0], MessageAbortedError) and got[0].seq == 0
    with pytest.raises(BrokenPeerError, match="abort frame of message seq 0 was interrupted"):
        writer.enqueue("next", timeout=T)


class _InterruptsLoading:
    def __reduce__(self) -> Any:
        return (_interrupt, ())


def _interrupt() -> Any:
    raise KeyboardInterrupt


def test_a_reader_interrupted_mid_run_raises_for_that_message_at_the_next_dequeue(
    stream_group: Callable[..., Group],
) -> None:
    """The message is consumed, not lost unseen: the next dequeue skips the rest of its
    run and raises DecodeError for it; the one after returns the next message."""
    g = stream_group(1)
    reader = g.readers[0]
    sent = threading.Event()

    def send() -> None:
        g.writer.enqueue([_InterruptsLoading(), b"z" * 60_000], timeout=T)
        g.writer.enqueue("next", timeout=T)
        sent.set()

    writer = threading.Thread(target=send)
    writer.start()
    with pytest.raises(KeyboardInterrupt):
        reader.dequeue(timeout=T)
    with pytest.raises(DecodeError, match=r"message seq 0 .*interrupted mid-run "
                       r"\(KeyboardInterrupt\); the rest of its run was skipped"):
        reader.dequeue(timeout=T)
    assert reader.dequeue(timeout=T) == "next"
    writer.join(T)
    assert sent.is_set()


class _HeldWhilePickling:
    """Pickles 100 KB (a run begins), then holds the writer until ``release`` is set;
    ``pickling`` tells that it is held."""

    pickling = threading.Event()
    release = threading.Event()

    def __reduce__(self) -> Any:
        self.pickling.set()
        self.release.wait(T)
        return (str, ("slow",))


@pytest.mark.parametrize("cancels", [1, 2], ids=["mid-run", "again-while-skipping-the-rest"])
def test_a_reader_cancelled_mid_run_raises_for_that_message_at_the_next_dequeue(
    stream_group: Callable[..., Group], cancels: int,
) -> None:
    """Cancelled mid-run (and, the second time, again while the next dequeue skips the
    run's rest, the writer still pickling): the message raises DecodeError once, at the
    dequeue that finishes the skip, and the next message follows."""
    g = stream_group(1)
    reader = g.readers[0]
    cancel = threading.Event()
    held = _HeldWhilePickling()
    held.pickling.clear()
    held.release.clear()

    def send_both() -> None:
        g.writer.enqueue([b"c" * 100_000, held], timeout=T)
        g.writer.enqueue("next", timeout=T)

    writer = threading.Thread(target=send_both)
    writer.start()
    me = threading.current_thread()

    def cancel_once_blocked() -> None:
        held.pickling.wait(T)  # the run's first chunks are out; the writer is held
        wait_blocked(me, T)  # the reader waits for the run's rest
        cancel.set()

    try:
        for _ in range(cancels):
            canceller = threading.Thread(target=cancel_once_blocked)
            canceller.start()
            try:
                with pytest.raises(CancelledError):
                    reader.dequeue(timeout=T, cancel=cancel)
            finally:
                canceller.join(T)
            cancel.clear()
    finally:
        held.release.set()
    with pytest.raises(DecodeError, match=r"message seq 0 .*interrupted mid-run"):
        reader.dequeue(timeout=T)
    assert reader.dequeue(timeout=T) == "next"
    writer.join(T)


def test_a_reader_closed_after_an_interrupt_mid_run_closes_cleanly(
    stream_group: Callable[..., Group],
) -> None:
    g = stream_group(1)
    reader = g.readers[0]
    failed: list[BaseException] = []

    def send() -> None:
        try:
            g.writer.enqueue([_InterruptsLoading(), b"z" * 60_000], timeout=T)
        except BrokenPeerError as exc:
            failed.append(exc)

    writer = threading.Thread(target=send)
    writer.start()
    with pytest.raises(KeyboardInterrupt):
        reader.dequeue(timeout=T)
    reader.close()  # the run held a chunk: no view may pin the mapping
    g.readers.remove(reader)
    writer.join(JOIN)  # the writer is not left waiting mid-run for a reader that left
    assert not writer.is_alive()
    assert all("left" in str(exc) for exc in failed)


def test_close_with_a_run_left_unfinished_aborts_it_first(
    stream_group: Callable[..., Group],
) -> None:
    """The writer was interrupted while it waited for room; close() publishes the
    ABORT (the reader reads meanwhile), then SHUTDOWN: the reader gets
    MessageAbortedError, then ClosedError."""
    g = stream_group(1)
    writer = g.writer
    _interrupt_while_waiting_for_room(writer)
    results: list[Any] = []

    def read() -> None:
        for _ in range(2):
            try:
                results.append(g.readers[0].dequeue(timeout=T))
            except VerifiedRingError as exc:
                results.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    writer.close()
    reader.join(JOIN)
    assert isinstance(results[0], MessageAbortedError) and results[0].seq == 0
    assert isinstance(results[1], ClosedError) and "after 1 messages" in str(results[1])


def test_the_first_claim_timing_out_publishes_nothing_and_keeps_nothing(
    stream_group: Callable[..., Group],
) -> None:
    g = stream_group(1)
    for i in range(CHUNKS):  # fill the ring with inline messages
        g.writer.enqueue(i, timeout=T)
    big = b"t" * 100_000
    with pytest.raises(RingTimeoutError, match=r"could not enqueue message seq 4"):
        g.writer.enqueue(big, timeout=0.05)
    run = writer_run(g.writer)
    assert not run.active and not run_holds_object(g.writer)
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.extend(
        g.readers[0].dequeue(timeout=T) for _ in range(CHUNKS + 1)))
    reader.start()
    g.writer.enqueue(big, timeout=T)  # the retry: the same seq
    reader.join(JOIN)
    assert got == [*range(CHUNKS), big]


def test_queue_ends_in_stream_mode_are_freed_without_the_collector() -> None:
    gc.disable()
    try:
        writer = MessageQueue(1, 1, large_objects="stream")
        reader = MessageQueue.create_from_handle(writer.export_handle(), 0)
        refs = [weakref.ref(writer), weakref.ref(reader)]
        del writer, reader
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def test_a_writer_left_with_a_cut_run_is_freed_without_the_collector() -> None:
    """An interrupt mid-run leaves the run's abort due; the writer dropped then is still
    freed at once (no cycle through the interrupt's traceback, nor through the warning
    that the abort found no room in the linger): its reader is told."""
    gc.disable()
    try:
        writer = MessageQueue(1, 1, max_chunk_bytes=CHUNK, max_chunks=CHUNKS,
                              large_objects="stream", linger=0.1)
        reader = MessageQueue.create_from_handle(writer.export_handle(), 0)
        writer.wait_until_ready(T)
        reader.wait_until_ready(T)
        _interrupt_while_waiting_for_room(writer)
        ref = weakref.ref(writer)
        del writer
        assert ref() is None
        with pytest.raises(ClosedError, match=r"after 0 messages, in the middle of message "
                           r"seq 0's run \(part 3 read\)"):
            reader.dequeue(timeout=T)
        reader.close()
    finally:
        gc.enable()


def _pause() -> None:
    """The writer, streaming the rest, runs meanwhile, until it must wait (or ends)."""
    writer = next(t for t in threading.enumerate() if t.name == "writer")
    with contextlib.suppress(RuntimeError):  # it ended: it ran as far as it could
        wait_blocked(writer, T)


class _PausesTheReader:
    def __reduce__(self) -> Any:
        return (_pause, ())


def test_a_chunk_is_released_only_once_its_bytes_are_consumed(
    stream_group: Callable[..., Group],
) -> None:
    """The unpickler pauses while the chunk it is in still holds the start of the next
    bytes (not yet copied out). The writer, streaming those bytes, must wait for that
    chunk: were it released already (when its header was read), the writer would lap
    the ring and overwrite it before the reader copies it."""
    g = stream_group(1)
    pattern = bytes(range(256)) * 400  # 100 KiB, no two chunks alike
    obj = [b"a" * 6000, _PausesTheReader(), pattern]

    (got,) = _exchange(g, lambda: g.writer.enqueue(obj, timeout=T), 1)
    assert got[0][0] == b"a" * 6000 and got[0][1] is None
    assert got[0][2] == pattern


def test_a_broken_run_is_refused_naming_the_chunk(stream_group: Callable[..., Group]) -> None:
    g = stream_group(1)
    run = writer_run(g.writer)
    run.begin(0, wire_deadline(), lambda: None, None)
    run.write(b"\0" * (2 * CHUNK))  # FIRST and MORE published, the third chunk held
    run.seq = 5  # ... and it claims to belong to another message
    run.finish()
    with pytest.raises(BrokenPeerError, match=r"in ring chunk 2 got RUN_LAST seq 5 part 2, "
                       r"expected part 2 \(RUN_MORE, RUN_LAST or RUN_ABORT\) of message seq 0"):
        g.readers[0].dequeue(timeout=T)
    with pytest.raises(BrokenPeerError):  # broken for good
        g.readers[0].dequeue(timeout=0)


def wire_deadline() -> Any:
    from verifiedring.waiting import Deadline

    return Deadline.after(T)


def test_large_objects_must_name_a_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MisuseError, match=r"large_objects='ring': must be one of"):
        MessageQueue(1, 1, large_objects="ring")
    monkeypatch.setenv("VERIFIEDRING_LARGE_OBJECTS", "rings")
    with pytest.raises(MisuseError, match=r"VERIFIEDRING_LARGE_OBJECTS='rings': must be one"):
        MessageQueue(1, 1)
    monkeypatch.setenv("VERIFIEDRING_LARGE_OBJECTS", "stream")
    with MessageQueue(1, 1) as q:
        assert isinstance(q, QueueWriter)
        assert q.large_objects == "stream"  # the default where vLLM builds the queue
    monkeypatch.delenv("VERIFIEDRING_LARGE_OBJECTS")
    with MessageQueue(1, 1) as q:
        assert isinstance(q, QueueWriter)
        assert q.large_objects == "socket"


def _drain(handle: Any, n: int) -> list[int]:
    with MessageQueue.create_from_handle(handle, 1) as reader:
        reader.wait_until_ready(T)
        return [len(reader.dequeue(timeout=T)[0]) for _ in range(n)]


def test_writer_memory_does_not_grow_with_the_object() -> None:
    """A 32 MiB object (bytes nested in a tuple: pickled in band) streams through a
    64 KiB ring with the writer's traced allocations below two chunks plus the
    pickler's 64 KiB frame: no whole-object copy."""
    writer = MessageQueue(1, 1, [1], max_chunk_bytes=64 * 1024, max_chunks=4,
                          large_objects="stream")
    try:
        with Supervisor([Task(_drain, (writer.export_handle(), 2), name="reader")]) as run:
            writer.wait_until_ready(T)
            big = (b"m" * (32 * 1024 * 1024),)
            writer.enqueue(big, timeout=T)  # warm-up: the pickler and the run exist
            tracemalloc.start()
            writer.enqueue(big, timeout=T)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert raise_for(run.wait(T)) == [[32 * 1024 * 1024] * 2]
        assert peak < 2 * 64 * 1024 + 64 * 1024 + 32 * 1024, peak
    finally:
        writer.close()


def test_the_run_kinds_are_named() -> None:
    assert [wire.kind_name(k) for k in (5, 6, 7, 8)] == [
        "RUN_FIRST", "RUN_MORE", "RUN_LAST", "RUN_ABORT"
    ]
