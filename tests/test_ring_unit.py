"""ShmRingBuffer, one behaviour at a time: flag store order, errors, ownership."""

from __future__ import annotations

import logging
import os
import pickle
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from support.fakes import segment_exists

from verifiedring import (
    BrokenPeerError,
    ClosedError,
    MisuseError,
    ReaderCursor,
    RingHandle,
    RingTimeoutError,
    ShmRingBuffer,
    WriterCursor,
)
from verifiedring.steps import (
    READER_POLL_READ_FLAG,
    READER_POLL_WRITTEN,
    READER_READ_PAYLOAD,
    READER_RELEASE,
    WRITER_ABORT,
    WRITER_CHECK_SLEEP,
    WRITER_CLEAR_READ_FLAG,
    WRITER_CLEAR_WRITTEN,
    WRITER_FILL_PAYLOAD,
    WRITER_POLL_READ_FLAG,
    WRITER_POLL_WRITTEN,
    WRITER_PUBLISH,
)
from verifiedring.testing.probe import FlagProbe, RecordingObserver
from verifiedring.waiting import Deadline, StallLog, wait_for

CHUNK = 32


class Boom(Exception):
    """Raised inside a with-body on purpose."""


def write(w: WriterCursor, payload: bytes, timeout: float | None = 5.0) -> None:
    with w.acquire_write(timeout) as buf:
        buf[0] = len(payload)
        buf[1 : 1 + len(payload)] = payload


def read(r: ReaderCursor, timeout: float | None = 5.0) -> bytes:
    with r.acquire_read(timeout) as buf:
        return bytes(buf[1 : 1 + buf[0]])


class Rig:
    """A ring, its writer (on the creator's instance) and readers (on an attached one)."""

    def __init__(self, n_reader: int = 1, max_chunks: int = 2, observe: bool = False) -> None:
        self.ring = ShmRingBuffer(n_reader, CHUNK, max_chunks)
        self.rring = ShmRingBuffer.attach(self.ring.handle())
        self.probe = FlagProbe(self.ring)
        self.rec = RecordingObserver(self.probe)
        obs = self.rec if observe else None
        self.w = self.ring.writer(obs)
        self.readers = [self.rring.reader(k, obs) for k in range(n_reader)]

    def roundtrip(self, payload: bytes) -> None:
        """A real write and a read by every reader: the ring still works."""
        write(self.w, payload)
        assert [read(r) for r in self.readers] == [payload] * len(self.readers)

    def close(self) -> None:
        self.probe.close()
        self.rring.close()
        self.ring.close()


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig(n_reader=2, max_chunks=2)
    yield r
    r.close()


# -- the exact flag stores of one write and one read --------------------------------------


def test_write_stores_flags_in_protocol_order() -> None:
    rig = Rig(n_reader=3, max_chunks=1, observe=True)
    try:
        rig.roundtrip(b"first")  # every read flag of chunk 0 is now 1
        assert rig.probe.flags(0) == (1, 1, 1, 1)
        rig.rec.clear()
        write(rig.w, b"second")
        steps = [(e.action, e.chunk, e.reader, e.before, e.after) for e in rig.rec.events]
        assert steps == [
            (WRITER_POLL_WRITTEN, 0, None, (1, 1, 1, 1), (1, 1, 1, 1)),
            (WRITER_POLL_READ_FLAG, 0, 0, (1, 1, 1, 1), (1, 1, 1, 1)),
            (WRITER_POLL_READ_FLAG, 0, 1, (1, 1, 1, 1), (1, 1, 1, 1)),
            (WRITER_POLL_READ_FLAG, 0, 2, (1, 1, 1, 1), (1, 1, 1, 1)),
            (WRITER_CLEAR_WRITTEN, 0, None, (1, 1, 1, 1), (0, 1, 1, 1)),
            (WRITER_FILL_PAYLOAD, 0, None, (0, 1, 1, 1), (0, 1, 1, 1)),
            (WRITER_CLEAR_READ_FLAG, 0, 0, (0, 1, 1, 1), (0, 0, 1, 1)),
            (WRITER_CLEAR_READ_FLAG, 0, 1, (0, 0, 1, 1), (0, 0, 0, 1)),
            (WRITER_CLEAR_READ_FLAG, 0, 2, (0, 0, 0, 1), (0, 0, 0, 0)),
            (WRITER_PUBLISH, 0, None, (0, 0, 0, 0), (1, 0, 0, 0)),
            (WRITER_CHECK_SLEEP, 0, None, (1, 0, 0, 0), (1, 0, 0, 0)),  # nobody asleep
        ], rig.rec.format()
        assert {e.actor for e in rig.rec.events} == {"writer"}
    finally:
        rig.close()


def test_read_stores_only_its_own_flag() -> None:
    rig = Rig(n_reader=3, max_chunks=2, observe=True)
    try:
        write(rig.w, b"x")
        rig.rec.clear()
        assert read(rig.readers[1]) == b"x"
        steps = [(e.actor, e.action, e.chunk, e.before, e.after) for e in rig.rec.events]
        assert steps == [
            ("reader1", READER_POLL_READ_FLAG, 0, (1, 0, 0, 0), (1, 0, 0, 0)),
            ("reader1", READER_POLL_WRITTEN, 0, (1, 0, 0, 0), (1, 0, 0, 0)),
            ("reader1", READER_READ_PAYLOAD, 0, (1, 0, 0, 0), (1, 0, 0, 0)),
            ("reader1", READER_RELEASE, 0, (1, 0, 0, 0), (1, 0, 1, 0)),
        ], rig.rec.format()
        assert rig.probe.flags(1) == (0, 0, 0, 0)  # the other chunk untouched
    finally:
        rig.close()


POLL_STEPS = (
    READER_POLL_READ_FLAG, READER_POLL_WRITTEN, WRITER_POLL_WRITTEN, WRITER_POLL_READ_FLAG
)


def test_failed_polls_store_nothing() -> None:
    rig = Rig(n_reader=1, max_chunks=1, observe=True)
    try:
        with pytest.raises(RingTimeoutError):
            read(rig.readers[0], timeout=0)
        write(rig.w, b"x")
        with pytest.raises(RingTimeoutError):
            write(rig.w, b"y", timeout=0)
        for e in rig.rec.events:
            if e.action in POLL_STEPS:
                assert e.before == e.after
        # timeout=0: exactly one poll, and it stores nothing: the reader's own flag is 0,
        # so it loads written (0) and stops; the writer sees written=1 and reader 0's flag 0
        assert rig.rec.actions("reader0") == [READER_POLL_READ_FLAG, READER_POLL_WRITTEN]
        assert rig.rec.actions("writer")[-4:] == [
            WRITER_PUBLISH, WRITER_CHECK_SLEEP, WRITER_POLL_WRITTEN, WRITER_POLL_READ_FLAG,
        ]
    finally:
        rig.close()


# -- exceptions inside the with-bodies --------------------------------------------------


def test_writer_exception_leaves_chunk_unpublished_and_reused() -> None:
    rig = Rig(n_reader=2, max_chunks=3, observe=True)
    try:
        write(rig.w, b"good 1")
        with pytest.raises(Boom), rig.w.acquire_write(1.0) as buf:
            buf[0] = 5
            buf[1:6] = b"bad!!"
            raise Boom
        assert rig.w.index == 1
        assert rig.probe.flags(1)[0] == 0  # not published
        assert rig.rec.events[-1].action == WRITER_ABORT
        assert rig.rec.events[-1].before == rig.rec.events[-1].after  # no flag store
        for r in rig.readers:
            assert read(r) == b"good 1"
            with pytest.raises(RingTimeoutError):
                read(r, timeout=0)  # nothing else was published
        rig.rec.clear()
        write(rig.w, b"good 2")
        assert {e.chunk for e in rig.rec.events} == {1}  # same chunk as the aborted write
        assert [read(r) for r in rig.readers] == [b"good 2", b"good 2"]
    finally:
        rig.close()


def test_reader_exception_still_releases_the_chunk() -> None:
    rig = Rig(n_reader=2, max_chunks=1, observe=True)
    try:
        write(rig.w, b"one")
        with pytest.raises(Boom), rig.readers[0].acquire_read(1.0):
            raise Boom
        assert rig.probe.flags(0) == (1, 1, 0)
        # by the with-block's exit (not by its lease's death, the cut exit's path)
        assert rig.rec.actions("reader0")[-2:] == ["ReaderReadPayload", "ReaderRelease"]
        assert read(rig.readers[1]) == b"one"
        write(rig.w, b"two", timeout=0)  # the writer is not stalled by the failed read
        assert [read(r) for r in rig.readers] == [b"two", b"two"]
    finally:
        rig.close()


# -- timeouts and warnings --------------------------------------------------------------


@pytest.mark.parametrize("timeout", [0, 0.05])
def test_writer_timeout_names_side_chunk_flags_and_duration(timeout: float) -> None:
    rig = Rig(n_reader=2, max_chunks=1)
    try:
        write(rig.w, b"a")
        assert read(rig.readers[0]) == b"a"
        with pytest.raises(RingTimeoutError) as info:
            write(rig.w, b"b", timeout=timeout)
        assert isinstance(info.value, TimeoutError)
        msg = str(info.value)
        assert "writer" in msg and f"pid {os.getpid()}" in msg
        assert "on chunk 0" in msg
        assert "saw written=1, read flags=[1, 0]" in msg
        assert "timed out after" in msg and " s " in msg
        assert "readers [1] have not read it" in msg
        assert read(rig.readers[1]) == b"a"
        rig.roundtrip(b"after the timeout")
    finally:
        rig.close()


@pytest.mark.parametrize("timeout", [0, 0.05])
def test_reader_timeout_names_side_chunk_flags_and_duration(rig: Rig, timeout: float) -> None:
    with pytest.raises(RingTimeoutError) as info:
        read(rig.readers[1], timeout=timeout)
    assert isinstance(info.value, TimeoutError)
    msg = str(info.value)
    assert "reader 1" in msg and f"pid {os.getpid()}" in msg
    assert "on chunk 0" in msg
    assert "saw written=0, own read flag=0" in msg
    assert "expected written=1 and own read flag 0" in msg
    assert "timed out after" in msg
    rig.roundtrip(b"after the timeout")


def test_timeout_reports_how_long_it_waited(rig: Rig) -> None:
    with pytest.raises(RingTimeoutError, match=r"timed out after 0\.[0-9]{3} s"):
        read(rig.readers[0], timeout=0.03)
    rig.roundtrip(b"ok")


def test_negative_timeout_is_rejected(rig: Rig) -> None:
    for bad in (-1, float("nan"), "1", True):
        with pytest.raises(MisuseError, match=r"timeout must be None or .*>= 0") as info:
            read(rig.readers[0], timeout=bad)  # type: ignore[arg-type]
        assert repr(bad) in str(info.value)
    rig.roundtrip(b"ok")


def test_long_wait_logs_who_has_not_read(caplog: pytest.LogCaptureFixture) -> None:
    ring = ShmRingBuffer(3, CHUNK, 1)
    rring = ShmRingBuffer.attach(ring.handle())
    try:
        w = ring.writer(log_interval=0.01)
        readers = [rring.reader(k) for k in range(3)]
        write(w, b"m")
        read(readers[0])
        with (
            caplog.at_level(logging.WARNING, logger="verifiedring"),
            pytest.raises(RingTimeoutError),
        ):
            write(w, b"n", timeout=0.1)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings, "a wait past log_interval must log"
        assert all("still waiting" in m for m in warnings)
        assert "readers [1, 2] have not read it" in warnings[0]
        assert "chunk 0" in warnings[0]
    finally:
        rring.close()
        ring.close()


def test_a_wait_whose_spin_outlasts_interval_and_timeout_still_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stall line counts the call's time, its spin included, and is due before the
    timeout is raised: a slow spin (a loaded machine) cannot hide a stall."""
    def slow_poll() -> bool:
        time.sleep(0.005)  # 16 of them: the spin outlasts both bounds below
        return False

    with (
        caplog.at_level(logging.WARNING, logger="verifiedring"),
        pytest.raises(RingTimeoutError),
    ):
        wait_for(
            slow_poll, Deadline.after(0.02), lambda: StallLog(lambda: "the test's wait", 0.01),
            lambda waited: RingTimeoutError(f"timed out after {waited:.3f} s"),
        )
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].endswith(" s: the test's wait")
    assert lines[0].startswith(f"pid {os.getpid()} still waiting after 0.")


# -- misuse --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "geometry",
    [(0, CHUNK, 2), (1, 0, 2), (1, CHUNK, 0), (1.0, CHUNK, 2), (1, "32", 2), (1, CHUNK, None)],
)
def test_bad_geometry(geometry: tuple[object, object, object], rig: Rig) -> None:
    with pytest.raises(MisuseError, match="must be an int >= 1"):
        ShmRingBuffer(*geometry)  # type: ignore[arg-type]
    rig.roundtrip(b"ok")


@pytest.mark.parametrize("index", [2, -1, 7, True])
def test_reader_index_out_of_range_says_local_position(index: int, rig: Rig) -> None:
    other = ShmRingBuffer.attach(rig.ring.handle())
    try:
        with pytest.raises(MisuseError) as info:
            other.reader(index)
        msg = str(info.value)
        assert f"reader index {index!r} out of range 0..1" in msg
        assert "position among the local readers, not its global rank" in msg
    finally:
        other.close()
    rig.roundtrip(b"ok")


def test_second_writer_in_one_process(rig: Rig) -> None:
    with pytest.raises(MisuseError, match="already has a writer"):
        rig.ring.writer()
    other = ShmRingBuffer.attach(rig.ring.handle())
    try:
        with pytest.raises(MisuseError, match=f"already has a writer in process {os.getpid()}"):
            other.writer()
    finally:
        other.close()
    rig.roundtrip(b"ok")


def test_reader_on_writers_instance_and_reverse(rig: Rig) -> None:
    with pytest.raises(MisuseError, match="this instance is the writer's; a reader cursor"):
        rig.ring.reader(0)
    with pytest.raises(MisuseError, match="this instance is the reader's; a writer cursor"):
        rig.rring.writer()
    rig.roundtrip(b"ok")


def test_two_readers_with_one_index(rig: Rig) -> None:
    with pytest.raises(MisuseError, match="already has a reader with flag index 1"):
        rig.rring.reader(1)
    other = ShmRingBuffer.attach(rig.ring.handle())
    try:
        with pytest.raises(MisuseError, match="each flag index belongs to one reader"):
            other.reader(0)
    finally:
        other.close()
    rig.roundtrip(b"ok")


def test_acquire_write_twice_without_finishing(rig: Rig) -> None:
    with (
        pytest.raises(MisuseError, match=r"writer of ring .* already holds chunk 0"),
        rig.w.acquire_write(1.0) as buf,
    ):
        buf[0] = 0
        with rig.w.acquire_write(1.0):
            pass
    # the outer write was aborted by the error: nothing published, chunk 0 reused
    for r in rig.readers:
        with pytest.raises(RingTimeoutError):
            read(r, timeout=0)
    rig.roundtrip(b"ok")
    assert rig.w.index == 1


def test_acquire_read_twice_without_finishing(rig: Rig) -> None:
    write(rig.w, b"one")
    write(rig.w, b"two")
    r = rig.readers[0]
    with (
        pytest.raises(MisuseError, match=r"reader0 of ring .* already holds chunk 0"),
        r.acquire_read(1.0),
        r.acquire_read(1.0),
    ):
        pass
    # the outer read was released when the error left its with-block
    assert read(r) == b"two"
    assert [read(rig.readers[1]) for _ in range(2)] == [b"one", b"two"]
    rig.roundtrip(b"ok")


def test_use_after_close() -> None:
    ring = ShmRingBuffer(1, CHUNK, 2)
    rring = ShmRingBuffer.attach(ring.handle())
    w, r = ring.writer(), rring.reader(0)
    write(w, b"x")
    rring.close()
    ring.close()
    ring.close()  # idempotent
    with pytest.raises(ClosedError, match="closed"):
        write(w, b"y")
    with pytest.raises(ClosedError, match="closed"):
        read(r)
    with pytest.raises(ClosedError, match="closed"):
        ring.writer()
    with pytest.raises(ClosedError, match="closed"):
        rring.reader(0)
    # close released the roles: a fresh ring in this process works
    rig = Rig(n_reader=1, max_chunks=1)
    try:
        rig.roundtrip(b"fresh")
    finally:
        rig.close()


def test_close_releases_roles_for_a_new_attach(rig: Rig) -> None:
    rig.rring.close()
    again = ShmRingBuffer.attach(rig.ring.handle())
    try:
        rig.readers = [again.reader(0), again.reader(1)]
        rig.roundtrip(b"ok")
    finally:
        again.close()


def test_keeping_a_chunk_view_blocks_close() -> None:
    ring = ShmRingBuffer(1, CHUNK, 1)
    rring = ShmRingBuffer.attach(ring.handle())
    try:
        w = ring.writer()
        with w.acquire_write() as buf:
            kept = buf[0:4]
        with pytest.raises(MisuseError, match="still referenced"):
            ring.close()
        kept.release()
    finally:
        rring.close()
        ring.close()
    assert not segment_exists(ring.name)


# -- attach, ownership, pickling ----------------------------------------------------------


def test_attach_to_missing_segment() -> None:
    handle = RingHandle(1, CHUNK, 2, "vr_does_not_exist_0000")
    with pytest.raises(BrokenPeerError, match="does not exist"):
        ShmRingBuffer.attach(handle)


def test_attach_with_larger_geometry_than_the_segment(rig: Rig) -> None:
    h = rig.ring.handle()
    too_big = RingHandle(h.n_reader, h.max_chunk_bytes, h.max_chunks + 1, h.name)
    with pytest.raises(BrokenPeerError) as info:
        ShmRingBuffer.attach(too_big)
    msg = str(info.value)
    assert f"has {h.layout.total_bytes} bytes" in msg
    assert f"needs {too_big.layout.total_bytes}" in msg
    rig.roundtrip(b"ok")


def test_attach_without_a_name() -> None:
    with pytest.raises(MisuseError, match="needs the segment name"):
        ShmRingBuffer(1, CHUNK, 1, create=False)


def test_creator_close_unlinks_attacher_close_does_not() -> None:
    ring = ShmRingBuffer(1, CHUNK, 1)
    other = ShmRingBuffer.attach(ring.handle())
    assert ring.is_creator and not other.is_creator
    assert segment_exists(ring.name)
    other.close()
    assert segment_exists(ring.name)
    ring.close()
    assert not segment_exists(ring.name)


def test_segment_mode_is_0600(rig: Rig) -> None:
    mode = os.stat(f"/dev/shm/{rig.ring.name}").st_mode
    assert stat.S_IMODE(mode) == 0o600


def test_pickle_ring_and_handle_round_trip_to_an_attach(rig: Rig) -> None:
    handle = rig.ring.handle()
    assert pickle.loads(pickle.dumps(handle)) == handle
    clone = pickle.loads(pickle.dumps(rig.rring))
    via_handle = ShmRingBuffer.attach(pickle.loads(pickle.dumps(handle)))
    try:
        for attached in (clone, via_handle):
            assert isinstance(attached, ShmRingBuffer)
            assert not attached.is_creator
            assert attached.handle() == handle
        rig.rring.close()
        rig.readers = [clone.reader(0), via_handle.reader(1)]
        rig.roundtrip(b"through pickled instances")
    finally:
        via_handle.close()
        clone.close()
    assert segment_exists(rig.ring.name)


_CHILD = textwrap.dedent(
    """
    import multiprocessing as mp
    import sys

    from verifiedring import RingHandle, ShmRingBuffer


    def child(handle):
        ring = ShmRingBuffer.attach(handle)
        r = ring.reader(0)
        with r.acquire_read(10.0) as buf:
            ok = bytes(buf[1 : 1 + buf[0]]) == b"hello child"
        ring.close()
        sys.exit(0 if ok else 3)


    if __name__ == "__main__":
        handle = RingHandle(1, int(sys.argv[2]), 1, sys.argv[1])
        p = mp.get_context("spawn").Process(target=child, args=(handle,))
        p.start()
        p.join(30)
        sys.exit(p.exitcode)
    """
)


def test_attach_in_spawned_child_neither_warns_nor_unlinks(tmp_path: object) -> None:
    ring = ShmRingBuffer(1, CHUNK, 1)
    try:
        write(ring.writer(), b"hello child")
        script = os.path.join(str(tmp_path), "child.py")
        with open(script, "w") as f:
            f.write(_CHILD)
        proc = subprocess.run(
            [sys.executable, script, ring.name, str(CHUNK)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert "leaked" not in proc.stderr and "resource_tracker" not in proc.stderr, proc.stderr
        assert segment_exists(ring.name), "an attacher's exit must not unlink the segment"
    finally:
        ring.close()
    assert not segment_exists(ring.name)


def test_the_wake_up_clears_and_wakes_exactly_the_readers_seen_asleep() -> None:
    """Readers 1 and 2 of 3 announced their sleep (their words are 1): after the
    publish the writer clears and wakes those two, in order, and names each in its
    steps; reader 0's word is left alone."""
    rig = Rig(n_reader=3, max_chunks=2)
    seen: list[tuple[str, str, int, int | None]] = []

    class Both:  # each call of each hook, as made
        def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
            seen.append(("before", action, chunk, reader))

        def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
            seen.append(("after", action, chunk, reader))

    try:
        rig.w.observer = Both()
        words = rig.ring.views.sleep_words
        words[1] = words[2] = 1
        write(rig.w, b"x")
        steps = [s for s in seen if s[1].startswith(("WriterCheck", "WriterClearS", "WriterWake"))]
        assert steps == [
            (hook, action, 0, r)
            for action, r in (("WriterCheckSleep", None), ("WriterClearSleep", 1),
                              ("WriterWake", 1), ("WriterClearSleep", 2), ("WriterWake", 2))
            for hook in ("before", "after")
        ]
        assert list(words) == [0, 0, 0, 0]  # the three sleep words, then the ended word
    finally:
        rig.close()


def test_a_lease_dropped_without_its_exit_lets_its_chunk_go() -> None:
    """What a with-block whose ``__exit__`` is cut at its entry amounts to (the real
    signal: tests/test_ring_interrupts.py): its lease dies holding the chunk. The
    writer's is left unpublished and reused (WriterExitCut), the reader's released
    (ReaderExitCut); a lease never entered, or whose exit ran, lets nothing go."""
    rig = Rig(n_reader=1, max_chunks=2, observe=True)
    try:
        idle = rig.w.acquire_write(1)  # claimed, never entered
        lease = rig.w.acquire_write(1)
        buf = lease.__enter__()
        buf[:1] = b"X"
        del idle  # dies inside another lease's block: nothing of it is let go
        assert rig.w.holding
        del buf, lease
        assert not rig.w.holding and rig.w.index == 0
        with pytest.raises(RingTimeoutError):
            read(rig.readers[0], timeout=0.05)
        write(rig.w, b"Y")  # chunk 0 again
        r = rig.readers[0]
        idle_read = r.acquire_read(1)
        lease = r.acquire_read(1)
        got = bytes(lease.__enter__()[:2])  # no view kept (an assert would keep one)
        del idle_read
        assert r.holding
        del lease
        assert got == b"\x01Y"
        assert not r.holding and r.index == 1
        write(rig.w, b"Z")
        assert read(r) == b"Z"
        assert [a for a in rig.rec.actions() if a.endswith(("ExitCut", "Abort", "Release"))] == [
            "WriterExitCut", "ReaderExitCut", "ReaderRelease"
        ]
    finally:
        rig.close()


def test_the_held_chunk_is_the_taken_one_and_none_is_refused_by_name() -> None:
    rig = Rig(n_reader=1, max_chunks=2)
    try:
        r = rig.readers[0]
        with pytest.raises(MisuseError) as info:
            r.held()
        assert str(info.value) == f"reader0 of ring {rig.ring.name!r} holds no chunk"
        write(rig.w, b"h")
        r.claim(Deadline.after(1))
        taken = r.take()
        held = r.held()
        assert held.tobytes() == taken.tobytes() and bytes(held[:2]) == b"\x01h"
        del taken, held
        r.release()
    finally:
        rig.close()


def test_a_ring_handle_unpacks_as_vllms_tuple() -> None:
    with ShmRingBuffer(2, 64, 3) as ring:
        n_reader, chunk_bytes, chunks, name = ring.handle()
        assert (n_reader, chunk_bytes, chunks, name) == (2, 64, 3, ring.name)
