"""vLLM's reader side over verifiedring's one wait loop: ``_spin_condition``,
``ReadTimeoutWithWarnings``, reader ``shutdown()``, raw ``acquire_read``, the stall line."""

from __future__ import annotations

import logging
import os
import pickle
import re
import signal
import socket
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
from support.engines import installed_over_fake_engines

from verifiedring import BrokenPeerError, CancelledError, MisuseError, RingTimeoutError
from verifiedring.compat import spin
from verifiedring.compat import vllm as shim
from verifiedring.compat.vllm import MessageQueue
from verifiedring.queue import wire
from verifiedring.testing import wait_blocked
from verifiedring.testing.launcher import Supervisor, Task, channel

T = 10.0


@pytest.fixture
def pair() -> Iterator[tuple[Any, Any]]:
    """A writer and its one local reader, handshaken; closed after the test."""
    w: Any = MessageQueue(1, 1, max_chunk_bytes=4096, max_chunks=4)
    r: Any = MessageQueue.create_from_handle(w.export_handle(), 0)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    try:
        yield w, r
    finally:
        r.close()
        w.close()


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """``call`` in a daemon thread; the list gets its result or what it raised."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


# --- _spin_condition: busy yields, one idle block per wait -----------------------------


def test_an_idle_reader_blocks_once_until_the_writers_publish(pair: tuple[Any, Any]) -> None:
    w, r = pair
    sc = r._spin_condition
    assert r._cursor.sleeper is sc  # plugged into the reader's own waits
    sc.last_read = 0  # idle
    with (
        mock.patch.object(sc, "wait", wraps=sc.wait) as wait,
        mock.patch.object(sc.poller, "poll", wraps=sc.poller.poll) as poll,
    ):
        t, out = _in_thread(lambda: r.dequeue(timeout=T))
        wait_blocked(t, T)  # asleep in the futex
        w.enqueue("woken by the publish")
        t.join(T)
    assert out == ["woken by the publish"]
    # one block: the watch bound (the default recheck interval is longer)
    assert wait.call_args_list == [mock.call(timeout_ms=500)]
    assert poll.call_args_list == [mock.call(timeout=500)]
    assert sc.last_read > 0  # the read was recorded: busy now


def test_a_busy_reader_yields_once_per_wait_and_never_blocks(pair: tuple[Any, Any]) -> None:
    _, r = pair
    sc = r._spin_condition
    sc.busy_loop_s = 9999
    with (
        mock.patch.object(sc, "wait", wraps=sc.wait) as wait,
        mock.patch.object(sc.poller, "poll", wraps=sc.poller.poll) as poll,
        pytest.raises(RingTimeoutError),
    ):
        r.dequeue(timeout=0.05)
    assert wait.call_count > 1 and poll.call_count == 0


def test_an_idle_wait_that_times_out_is_one_block(pair: tuple[Any, Any]) -> None:
    _, r = pair
    sc = r._spin_condition
    sc.last_read = 0
    with mock.patch.object(sc, "wait", wraps=sc.wait) as wait, pytest.raises(RingTimeoutError):
        r.dequeue(timeout=0.02)
    assert wait.call_count == 1


def test_the_recheck_interval_bounds_one_idle_block(pair: tuple[Any, Any]) -> None:
    """A poll that ends without a wake (a lost notify, vLLM's case): the reader
    re-reads the ring after the recheck interval and finds the message."""
    w, r = pair
    sc = r._spin_condition
    sc.last_read = 0
    published = threading.Event()

    def blind_poll(*, timeout: int | None = None) -> list[Any]:
        w.enqueue("seen on the recheck")
        published.set()
        return []

    with (
        mock.patch.object(shim, "SHM_READER_RECHECK_INTERVAL_MS", 40),
        mock.patch.object(sc.poller, "poll", side_effect=blind_poll) as poll,
    ):
        assert r.dequeue(timeout=T, indefinite=True) == "seen on the recheck"
    assert published.is_set() and poll.call_args_list == [mock.call(timeout=40)]


def test_the_writers_spin_condition_is_a_closable_stand_in(pair: tuple[Any, Any]) -> None:
    w, r = pair
    sockets = [
        w._spin_condition.local_notify_socket,
        r._spin_condition.local_notify_socket,
        r._spin_condition.read_cancel_socket,
        r._spin_condition.write_cancel_socket,
    ]
    for s in sockets:
        s.close(linger=0)
        s.close(linger=0)
    assert [s.closed for s in sockets] == [True] * 4
    assert w._spin_condition.is_reader is False and r._spin_condition.is_reader is True
    with pytest.raises(MisuseError, match="cannot wait"):
        w._spin_condition.wait()


# --- ReadTimeoutWithWarnings: the same block rule ---------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(spin, "time", types.SimpleNamespace(monotonic=c))
    monkeypatch.setattr("verifiedring.waiting._monotonic", c)
    return c


def test_timeout_ms_is_the_least_of_recheck_warning_and_deadline(
    clock: _Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim, "SHM_READER_RECHECK_INTERVAL_MS", 7)
    assert MessageQueue.ReadTimeoutWithWarnings(None, False).timeout_ms() == 7
    assert MessageQueue.ReadTimeoutWithWarnings(None, True).timeout_ms() == 7
    monkeypatch.setattr(shim, "SHM_READER_RECHECK_INTERVAL_MS", 5000)
    assert spin.ReadTimeoutWithWarnings(None, False).timeout_ms() == 500  # the watch bound
    monkeypatch.setattr(shim, "VLLM_RINGBUFFER_WARNING_INTERVAL", 0.2)
    assert spin.ReadTimeoutWithWarnings(None, True).timeout_ms() == 200
    assert spin.ReadTimeoutWithWarnings(None, False).timeout_ms() == 500
    timed = spin.ReadTimeoutWithWarnings(0.05, True)
    assert timed.timeout_ms() == 50
    clock.now += 0.03
    assert timed.timeout_ms() == 20
    clock.now += 0.02
    with pytest.raises(TimeoutError):
        timed.timeout_ms()


def test_should_warn_once_per_interval_and_never_without_warnings(
    clock: _Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim, "VLLM_RINGBUFFER_WARNING_INTERVAL", 60)
    warned, quiet = spin.ReadTimeoutWithWarnings(None, True), spin.ReadTimeoutWithWarnings(
        None, False
    )
    seen = []
    for step in (59.0, 1.0, 1.0, 59.0, 600.0):
        clock.now += step
        seen.append((warned.should_warn(), quiet.should_warn()))
    assert seen == [(False, False), (True, False), (False, False), (True, False),
                    (True, False)]


# --- shutdown(): cancels a local reader's waits, not its published messages --------------


@pytest.mark.parametrize("mode", ["idle", "busy"])
def test_shutdown_cancels_a_blocked_dequeue_at_once(
    pair: tuple[Any, Any], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, r = pair
    sc = r._spin_condition
    monkeypatch.setattr(spin, "WATCH_BOUND", 60.0)  # an uncut block would outlast T
    monkeypatch.setattr(shim, "SHM_READER_RECHECK_INTERVAL_MS", 60_000)
    waiting = threading.Event()
    real_wait = sc.wait

    def wait(timeout_ms: int | None = None) -> None:
        waiting.set()
        real_wait(timeout_ms=timeout_ms)

    if mode == "idle":
        sc.last_read = 0
    else:
        sc.busy_loop_s = 9999
    with mock.patch.object(sc, "wait", side_effect=wait) as counted:
        t, out = _in_thread(lambda: r.dequeue(timeout=120))
        assert waiting.wait(T)
        if mode == "idle":
            wait_blocked(t, T)
        r.shutdown()
        t.join(T)
    assert not t.is_alive() and len(out) == 1 and isinstance(out[0], CancelledError)
    assert isinstance(out[0], RuntimeError)
    assert str(out[0]) == (
        f"local reader rank 0 (pid {os.getpid()}): the wait was "
        "cancelled: shutdown() was called"
    )
    if mode == "idle":
        assert counted.call_count == 1  # the one block was cut, not timed out


def test_after_shutdown_published_messages_come_out_then_waits_are_cancelled(
    pair: tuple[Any, Any],
) -> None:
    w, r = pair
    w.enqueue("first")
    r.shutdown()
    w.enqueue("second")
    assert [r.dequeue(timeout=0), r.dequeue(timeout=T)] == ["first", "second"]
    with pytest.raises(CancelledError, match="cancelled"):
        r.dequeue(timeout=T)
    with pytest.raises(CancelledError, match="cancelled"), r.acquire_read(timeout=T):
        pass
    w.enqueue("third")
    with r.acquire_read(timeout=0) as buf:
        assert pickle.loads(buf) == "third"
    assert r.shutting_down


# --- acquire_read: the chunk in place ------------------------------------------------


def _flags(q: Any) -> list[int]:
    with q.buffer.get_metadata(0) as m:
        return list(m)


def test_acquire_read_lends_the_chunk_and_releases_it_after_the_body(
    pair: tuple[Any, Any],
) -> None:
    w, r = pair
    w.enqueue({"any": "object"})
    with r.acquire_read(timeout=T) as buf:
        # the bytes stored after the header, none past them (pages there may be unreserved)
        assert buf.readonly and bytes(buf) == pickle.dumps({"any": "object"}, protocol=5)
        assert _flags(w) == [1, 0]  # still this reader's: the writer cannot reuse it
    assert _flags(w) == [1, 1]
    w.enqueue("next")
    assert r.dequeue(timeout=T) == "next"


def test_acquire_read_releases_the_chunk_when_the_body_raises(pair: tuple[Any, Any]) -> None:
    w, r = pair
    w.enqueue("first")
    with pytest.raises(ValueError, match="the body failed"), r.acquire_read(timeout=T):
        raise ValueError("the body failed")
    assert _flags(w) == [1, 1]
    for i in range(5):  # the ring goes round: every chunk is free again
        w.enqueue(i, timeout=T)
        assert r.dequeue(timeout=T) == i


def test_acquire_read_keeps_the_sequence_check(pair: tuple[Any, Any]) -> None:
    w, r = pair
    w.enqueue("seq 0")
    with r.buffer.get_data(0) as data:  # the chunk now claims to be message 5
        kind, _, nstream, nbuf = wire.HEADER.unpack_from(data, 0)
        wire.HEADER.pack_into(data, 0, kind, 5, nstream, nbuf)
    with (
        pytest.raises(BrokenPeerError, match="got INLINE seq 5, expected message seq 0"),
        r.acquire_read(timeout=T),
    ):
        pass


def test_acquire_read_of_an_overflow_message_yields_bytes_or_refuses(
    pair: tuple[Any, Any],
) -> None:
    w, r = pair
    big = bytes(range(256)) * 64  # 16 KiB: its frame goes on the socket
    w.enqueue(big)
    w.enqueue({"big": big})
    w.enqueue("after")
    with r.acquire_read(timeout=T) as buf:
        assert buf.readonly and bytes(buf) == big
    with pytest.raises(MisuseError, match="type dict"), r.acquire_read(timeout=T):
        pass
    assert r.dequeue(timeout=T) == "after"  # the refused one was consumed


def test_acquire_read_of_a_run_yields_bytes_or_refuses() -> None:
    w: Any = MessageQueue(1, 1, max_chunk_bytes=4096, max_chunks=2, large_objects="stream")
    r: Any = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        big = bytes(range(256)) * 64
        t, out = _in_thread(lambda: [w.enqueue(big, timeout=T), w.enqueue([big], timeout=T)])
        with r.acquire_read(timeout=T) as buf:
            assert bytes(buf) == big
        with pytest.raises(MisuseError, match="type list"), r.acquire_read(timeout=T):
            pass
        t.join(T)
        assert out == [[None, None]]
    finally:
        r.close()
        w.close()


# --- the stall line, in vLLM's words -------------------------------------------------


@pytest.fixture
def vllm_installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    yield from installed_over_fake_engines(monkeypatch)


def test_a_reader_stall_logs_vllms_line_at_info_once_per_interval(
    vllm_installed: types.ModuleType, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(shim, "VLLM_RINGBUFFER_WARNING_INTERVAL", 0.3)
    caplog.set_level(logging.DEBUG)
    w: Any = MessageQueue(1, 1)
    r: Any = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        with pytest.raises(RingTimeoutError):
            r.dequeue(timeout=0.5)  # one line at 0.3 s; the next would be at 0.6 s
        lines = [(x.name, x.levelno, x.getMessage()) for x in caplog.records]
        assert len(lines) == 1
        name, level, text = lines[0]
        assert (name, level) == (shim.VLLM_MODULE, logging.INFO)
        assert text.startswith(
            "No available shared memory broadcast block found in 0 seconds (the warning "
            "interval): a peer process is hung or busy with long work; pid "
        )
        assert re.search(r"still waiting after 0\.\d s: local reader rank 0 \(pid \d+\) waits "
                         r"for message seq 0 in chunk 0 ", text)
        assert text.endswith(
            f"from the writer (pid {os.getpid()} on host {socket.gethostname()}), its process "
            "holds the ring; it has taken no message yet")
        caplog.clear()
        with pytest.raises(RingTimeoutError):
            r.dequeue(timeout=0.5, indefinite=True)
        assert caplog.records == []
    finally:
        r.close()
        w.close()


def test_a_writer_stall_names_the_reader_it_waits_for_and_whether_it_lives(
    vllm_installed: types.ModuleType, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(shim, "VLLM_RINGBUFFER_WARNING_INTERVAL", 0.3)
    caplog.set_level(logging.DEBUG)
    w: Any = MessageQueue(2, 2, max_chunk_bytes=1024, max_chunks=1)
    h = w.export_handle()
    readers: list[Any] = [MessageQueue.create_from_handle(h, rank) for rank in (0, 1)]
    try:
        for q in (w, *readers):
            q.wait_until_ready(T)
        w.enqueue("fills the ring", timeout=T)
        assert readers[1].dequeue(T) == "fills the ring"  # rank 0 never reads
        with pytest.raises(RingTimeoutError) as err:
            w.enqueue("waits", timeout=0.5)
        lines = [x.getMessage() for x in caplog.records]
        assert len(lines) == 1 and lines[0].startswith(
            "No available shared memory broadcast block found in 0 seconds")
        stuck = (f"readers [0] (reader rank 0 (pid {os.getpid()} on host "
                 f"{socket.gethostname()}), its process is alive) have not read it, published ")
        for text in (lines[0], str(err.value)):  # the chunk's age: at least the wait's
            head, ago = text.rsplit(stuck, 1)
            assert head and float(ago.removesuffix(" s ago")) >= 0.3, text
    finally:
        for q in (*readers, w):
            q.close()


# --- the dead-writer watch still runs between idle blocks --------------------------------


def _writer_proc() -> None:
    with MessageQueue(1, 1, max_chunks=2) as w:
        channel().send(w.export_handle())
        w.wait_until_ready(T)
        w.enqueue("first", timeout=T)
        time.sleep(T)  # the test kills this process here


def test_an_idle_reader_names_a_killed_writer_despite_a_long_recheck_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shim, "SHM_READER_RECHECK_INTERVAL_MS", 60_000)
    with Supervisor([Task(_writer_proc, (), name="writer")]) as run:
        pid = run.pid("writer")
        with MessageQueue.create_from_handle(run.channel("writer").recv(T), 0) as r:
            r.wait_until_ready(T)
            assert r.dequeue(T) == "first"
            sc = r._spin_condition
            sc.last_read = 0
            run.signal("writer", signal.SIGKILL)
            t, out = _in_thread(lambda: r.dequeue(None))
            t.join(4.0)  # blocks of at most WATCH_BOUND (0.5 s), then LOST_GRACE (0.5 s): ~1 s
            assert not t.is_alive() and len(out) == 1 and isinstance(out[0], BrokenPeerError)
            assert f"the writer (pid {pid} on host {socket.gethostname()}) is gone" in str(out[0])


def test_after_an_sglang_install_is_undone_the_warning_interval_is_vllms_again(
    clock: _Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uninstall() forgets the last install()'s engine: a later read of the interval
    takes vLLM's variable, not SGLang's (seen in CI: a test after an SGLang install in
    the same worker read 60 s for vLLM's patched 0.2 s)."""
    shim.install("sglang")
    shim.uninstall()
    monkeypatch.setattr(shim, "VLLM_RINGBUFFER_WARNING_INTERVAL", 0.2)
    monkeypatch.setattr(shim, "SHM_READER_RECHECK_INTERVAL_MS", 5000)
    assert spin.ReadTimeoutWithWarnings(None, True).timeout_ms() == 200
