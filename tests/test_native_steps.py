"""The native step core (``verifiedring.native``, ``_steps.c``) against the Python steps.

Its ``spec:`` lines are the writer's steps of ``cursors.py`` in their order; driven
through the same messages, reads and sleeping readers, a writer on it leaves every
byte of its ring and every field the steps keep exactly as a writer on the Python
steps does; and where it declines (observer, held chunk, closed ring, chunk not free,
pages not reserved, a message it does not carry) it stores nothing.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.signals import on_python_steps

from verifiedring import ClosedError, RingTimeoutError, ShmRingBuffer, native
from verifiedring.queue import LocalReader, QueueWriter
from verifiedring.queue.transmitters import LocalTransmitter
from verifiedring.queue.wire import HEADER_BYTES
from verifiedring.steps import WRITER_ABORT, WRITER_INTERRUPTED_IN_WAKE
from verifiedring.waiting import FOREVER

SRC = Path(__file__).resolve().parents[1] / "src" / "verifiedring"
C_SITE = re.compile(r"/\*\s*spec:\s*(\w+)")
PY_SITE = re.compile(r"#\s*spec:\s*(\w+)")
T = 10.0
CHUNK = 256
CHUNKS = 4
READERS = 2

BUILT = importlib.util.find_spec("verifiedring._steps") is not None
pytestmark = pytest.mark.skipif(
    not BUILT or not native.ENABLED,
    reason="the native step core is not built here (no compiler, or not Linux), or is off",
)


def _writer_sites_in_order() -> list[str]:
    """The ``# spec:`` sites of ``WriterCursor`` in ``cursors.py``, in source order,
    without WriterAbort (the native call never holds a chunk to let go)."""
    text = (SRC / "cursors.py").read_text()
    body = text[text.index("class WriterCursor") : text.index("class ReaderCursor")]
    return [s for s in PY_SITE.findall(body) if s != WRITER_ABORT]


def test_the_native_sites_are_the_writer_steps_in_the_python_order() -> None:
    """Every step of the Python writer's publish, once, in its order; the failed wake's
    handling (WriterInterruptedInWake: an ``except`` in Python, an error path in C) is
    in both, placed where each language handles it."""
    c_sites = C_SITE.findall((SRC / "_steps.c").read_text())
    py_sites = _writer_sites_in_order()
    assert WRITER_INTERRUPTED_IN_WAKE in c_sites and WRITER_INTERRUPTED_IN_WAKE in py_sites
    c_sites.remove(WRITER_INTERRUPTED_IN_WAKE)
    py_sites.remove(WRITER_INTERRUPTED_IN_WAKE)
    assert c_sites == py_sites
    assert c_sites[:2] == ["WriterPollWritten", "WriterPollReadFlag"]
    assert c_sites[-3:] == ["WriterCheckSleep", "WriterClearSleep", "WriterWake"]


class Pair:
    """A writer with ``READERS`` local readers, on the native step core or not."""

    def __init__(self, on_native: bool) -> None:
        self.writer = QueueWriter(READERS, READERS, list(range(READERS)),
                                  max_chunk_bytes=CHUNK, max_chunks=CHUNKS)
        h = self.writer.export_handle()
        self.readers = [LocalReader(h, r) for r in range(READERS)]
        self.writer.wait_until_ready(T)
        for r in self.readers:
            r.wait_until_ready(T)
        local = self.local
        if on_native:
            assert local._native_publish is not None
        else:
            on_python_steps(self.writer)

    @property
    def local(self) -> LocalTransmitter:
        local = self.writer._local
        assert local is not None
        return local

    def state(self) -> tuple[Any, ...]:
        """Every byte of the ring and what the steps keep (not when: published_at's clock)."""
        local = self.local
        cursor = local.cursor
        return (bytes(local.ring.segment.buf), local.committing, local.published,
                cursor.index, cursor.holds, cursor.holding, self.writer._life.seq,
                [at > 0 for at in local.published_at])

    def close(self) -> None:
        for r in self.readers:
            r.close()
        self.writer.close()


@pytest.fixture
def pair() -> Iterator[Pair]:
    """A writer on the native step core and its readers."""
    made = Pair(True)
    yield made
    made.close()


#: One operation on both pairs: a message of n bytes (some do not fit a chunk: the
#: socket flavor's marker, which the native call declines), a read by a reader, or a
#: reader's sleep word set to 1 (a reader announced its sleep: the writer's publish
#: clears it and wakes it).
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, CHUNK + 40)),
        st.tuples(st.just("read"), st.integers(0, READERS - 1)),
        st.tuples(st.just("sleep"), st.integers(0, READERS - 1)),
    ),
    max_size=30,
)


def _apply(pair: Pair, op: tuple[str, int], seq: int, pending: list[int]) -> Any:
    """``op`` on ``pair``; ``pending``: each reader's messages sent and not yet read. A
    read of a pending message waits for it (an overflow message's frame crosses
    ZeroMQ's IO thread: it may not be there yet); any other read must find nothing."""
    kind, arg = op
    if kind == "send":
        try:
            pair.writer.enqueue(bytes([seq % 256]) * arg, timeout=0)
        except RingTimeoutError:  # full: the same on both, nothing stored
            return "full"
        for r in range(READERS):
            pending[r] += 1
        return "sent"
    if kind == "read":
        if pending[arg]:
            pending[arg] -= 1
            return pair.readers[arg].dequeue(timeout=T)
        with pytest.raises(RingTimeoutError):
            pair.readers[arg].dequeue(timeout=0)
        return "empty"
    pair.local.cursor._sleep_words[arg] = 1
    return "asleep"


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_the_native_writer_leaves_every_byte_as_the_python_steps_do(
    ops: list[tuple[str, int]],
) -> None:
    native_pair, python_pair = Pair(True), Pair(False)
    try:
        assert native_pair.state()[1:] == python_pair.state()[1:]
        pending = {id(p): [0] * READERS for p in (native_pair, python_pair)}
        for n, op in enumerate(ops):
            got = [_apply(p, op, n, pending[id(p)]) for p in (native_pair, python_pair)]
            assert got[0] == got[1], (op, got)
            assert native_pair.state() == python_pair.state(), (n, op)
    finally:
        native_pair.close()
        python_pair.close()


def test_every_message_it_carries_takes_the_native_call(pair: Pair) -> None:
    local = pair.local
    calls: list[bool] = []
    real = local._native_publish
    assert real is not None

    def counted(owner: Any, seq: int, stream: bytes, stored: int) -> bool:
        calls.append(real(owner, seq, stream, stored))
        return calls[-1]

    local._native_publish = counted
    pair.writer.enqueue("one", timeout=T)
    pair.writer.enqueue(b"x" * (CHUNK * 2), timeout=T)  # an overflow marker: Python steps
    pair.writer.enqueue("three", timeout=T)
    assert calls == [True, True]
    assert [r.dequeue(timeout=T) for r in pair.readers for _ in range(3)] == [
        "one", b"x" * (CHUNK * 2), "three"] * READERS


def _declines(pair: Pair) -> bool:
    """A direct native call for the next message stores nothing and says so."""
    local = pair.local
    step = local._native_publish
    assert step is not None
    before = pair.state()
    stream = b"\x80\x05K\x07."  # pickle of 7
    done = step(local, pair.writer._life.seq, stream, HEADER_BYTES + len(stream))
    assert pair.state() == before
    return not done


def test_it_declines_a_chunk_not_free_and_the_writer_waits(pair: Pair) -> None:
    for n in range(CHUNKS):
        pair.writer.enqueue(n, timeout=T)
    assert _declines(pair)
    with pytest.raises(RingTimeoutError, match="chunk 0"):
        pair.writer.enqueue("late", timeout=0)
    assert [r.dequeue(timeout=T) for r in pair.readers] == [0, 0]
    pair.writer.enqueue("now", timeout=0)
    assert [r.dequeue(timeout=T) for r in pair.readers for _ in range(4)] == [
        1, 2, 3, "now"] * READERS


def test_it_declines_a_held_chunk_an_observer_and_unreserved_pages(pair: Pair) -> None:
    cursor = pair.local.cursor
    with pair.writer.acquire_write(T):  # the chunk held: the Python steps let it go first
        assert _declines(pair)
    cursor.observer = _NoSteps()
    assert _declines(pair)
    cursor.observer = None
    marks = cursor._marks
    kept, marks[cursor.index] = marks[cursor.index], 0
    assert _declines(pair)
    marks[cursor.index] = kept


class _NoSteps:
    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        pass

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        pass


def test_it_declines_a_closed_ring_and_the_writer_refuses(pair: Pair) -> None:
    local = pair.local
    step = local._native_publish
    assert step is not None
    local.cursor.detach()
    assert not step(local, 0, b"\x80\x05K\x07.", 27)
    with pytest.raises(ClosedError):
        local.cursor.claim(FOREVER)


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="CI only: CI builds the core")
def test_ci_runs_the_native_step_core() -> None:
    """CI's install builds the C module, so CI's suite runs the native step core (the
    skip above would otherwise hide a failed build)."""
    assert BUILT


def test_an_allocation_that_fails_in_the_call_stores_nothing() -> None:
    """Each allocation of the call made to fail in turn (CPython's ``_testcapi.set_nomemory``):
    the call raises MemoryError having stored nothing (no flag, no payload, no sleep word,
    no record), or succeeds whole. Every allocation comes before its first store, so
    none can leave a message published and unrecorded, or a sleeping reader unwoken."""
    testcapi = pytest.importorskip("_testcapi")  # CPython's own test hooks
    stream = b"\x80\x05K\x07."
    failures = 0
    for k in range(64):
        ring = ShmRingBuffer(2, 64, 2)
        try:
            cursor = ring.writer()
            owner = _Owner(2)
            step = native.writer_step(cursor, 2)
            assert step is not None
            cursor._sleep_words[1] = 1  # reader 1 asleep: a publish must wake it
            before = (bytes(ring.segment.buf), owner.committing, owner.published,
                      list(owner.published_at), cursor.index, cursor.holds)
            # the free lists of floats and small tuples emptied: the call's objects come
            # from the allocator, which is what fails
            held = [(n, n) for n in range(3000)] + [(n, n, n) for n in range(3000)]
            floats = [n + 0.5 for n in range(300)]
            testcapi.set_nomemory(k, k + 1)
            try:
                done = step(owner, 0, stream, HEADER_BYTES + len(stream))
            except MemoryError:
                done = None
            finally:
                testcapi.remove_mem_hooks()
            del held, floats
            after = (bytes(ring.segment.buf), owner.committing, owner.published,
                     list(owner.published_at), cursor.index, cursor.holds)
            if done is None:
                failures += 1
                assert after == before, k
                continue
            assert done is True
            assert owner.published == (0, True) and cursor.index == 1
            assert cursor._sleep_words[1] == 0 and cursor._flags[0][0] == 1
            break
        finally:
            ring.close()
    else:
        raise AssertionError("the call never succeeded")
    assert failures > 0  # some allocation was made to fail


def test_more_than_64_readers_are_each_woken() -> None:
    """The wake-up's snapshot is the step's own, one word per reader (no allocation
    per call): a ring of 70 readers, every other one asleep."""
    n = 70
    ring = ShmRingBuffer(n, 64, 2)
    try:
        cursor = ring.writer()
        owner = _Owner(2)
        step = native.writer_step(cursor, n)
        assert step is not None
        words = cursor._sleep_words
        for r in range(0, n, 2):
            words[r] = 1
        stream = b"\x80\x05K\x07."
        assert step(owner, 0, stream, HEADER_BYTES + len(stream))
        assert [words[r] for r in range(n)] == [0] * n
        assert owner.published == (0, True) and owner.committing == (0, True, 0)
        assert cursor.index == 1 and cursor._flags[0][0] == 1
    finally:
        ring.close()


class _Owner:
    """What the step stores its bookkeeping in, as the local transmitter keeps it."""

    def __init__(self, chunks: int) -> None:
        self.committing = (-1, True, 0)
        self.published = (-1, True)
        self.published_at = [0.0] * chunks
