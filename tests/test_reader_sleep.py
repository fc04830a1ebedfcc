"""Idle readers sleep on their sleep word and the writer wakes them (spec/sleep/ReaderSleep.tla).

The lost-wakeup tests place the writer's publish exactly in the two windows a
lost wake-up needs, with observers that hold one side at a step until the other
gets there: a wake-up that is lost leaves the reader blocked until its
``max_block`` (``BOUND`` here), so a reader that takes more than a fraction of
it to get the message has lost its wake-up.
"""

from __future__ import annotations

import os
import signal
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from verifiedring import RingTimeoutError, ShmRingBuffer, waiting
from verifiedring import cursors as cursors_module
from verifiedring.ring import ReaderCursor, WriterCursor
from verifiedring.shm import SharedSegment
from verifiedring.steps import (
    READER_ANNOUNCE_SLEEP,
    READER_BLOCK,
    READER_END_SLEEP,
    READER_POLL_READ_FLAG,
    READER_POLL_WRITTEN,
    READER_READ_PAYLOAD,
    READER_RELEASE,
    WRITER_CHECK_SLEEP,
    WRITER_PUBLISH,
)
from verifiedring.testing import wait_blocked
from verifiedring.testing.blocked import ReaderAsleep
from verifiedring.testing.launcher import Supervisor, Task, channel
from verifiedring.waiting import (
    MAX_BLOCK,
    SLEEP_KIND,
    Deadline,
    StallLog,
    futex_wait,
    wait_for,
)

pytestmark = pytest.mark.skipif(SLEEP_KIND != "futex", reason="no futex here")

BOUND = 5.0  # a reader's longest block in these tests: what a lost wake-up costs
LATE = 1.0  # a reader later than this lost its wake-up (generous: 2 shared cores)
HOLD = 10.0  # the longest an observer holds its side at a step
STAMP = struct.Struct("<q")  # the writer's time.monotonic_ns()


class Hooks:
    """A StepObserver that runs ``hooks[action]()`` before the first step ``action``
    and records every action."""

    def __init__(self, hooks: dict[str, Callable[[], None]]) -> None:
        self.hooks = dict(hooks)
        self.actions: list[str] = []

    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        self.actions.append(action)
        hook = self.hooks.pop(action, None)
        if hook is not None:
            hook()

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        pass


def _wait(event: threading.Event, what: str) -> None:
    assert event.wait(HOLD), f"{what} did not happen within {HOLD} s"


def _set_then_wait(done: threading.Event, then: threading.Event, what: str) -> Callable[[], None]:
    def hook() -> None:
        done.set()
        _wait(then, what)

    return hook


class Pair:
    """A writer and one reader (its own instance) on one ring."""

    def __init__(self, reader_hooks: Hooks | None = None, writer_hooks: Hooks | None = None):
        self.ring = ShmRingBuffer(1, 64, 2)
        self.readers_ring = ShmRingBuffer.attach(self.ring.handle())
        self.w: WriterCursor = self.ring.writer(observer=writer_hooks)
        self.r: ReaderCursor = self.readers_ring.reader(0, observer=reader_hooks)
        self.r.max_block = BOUND
        self.got: list[tuple[bytes, float]] = []  # payload, seconds from stamp to read
        self.error: BaseException | None = None

    def write(self, payload: bytes) -> None:
        with self.w.acquire_write(HOLD) as buf:
            buf[STAMP.size : STAMP.size + len(payload)] = payload
            STAMP.pack_into(buf, 0, time.monotonic_ns())

    def read_in_thread(self, n: int) -> threading.Thread:
        def run() -> None:
            try:
                for _ in range(n):
                    with self.r.acquire_read(3 * BOUND) as buf:
                        (stamp,) = STAMP.unpack_from(buf)
                        late = (time.monotonic_ns() - stamp) / 1e9
                        self.got.append((bytes(buf[STAMP.size : STAMP.size + 3]), late))
            except BaseException as exc:
                self.error = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def join(self, thread: threading.Thread) -> None:
        thread.join(3 * BOUND + HOLD)
        assert not thread.is_alive(), "the reader thread did not finish"
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.readers_ring.close()
        self.ring.close()


@pytest.fixture
def pair_factory() -> Iterator[Callable[..., Pair]]:
    made: list[Pair] = []

    def make(**kw: Any) -> Pair:
        made.append(Pair(**kw))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_publish_between_the_failed_poll_and_the_announcement(
    pair_factory: Callable[..., Pair],
) -> None:
    """The writer publishes (and finds the word 0) after the reader's last failed poll,
    before its ReaderAnnounceSleep: only the re-check after the announcement finds it."""
    at_announce, written = threading.Event(), threading.Event()
    hooks = Hooks({READER_ANNOUNCE_SLEEP: _set_then_wait(at_announce, written, "the write")})
    p = pair_factory(reader_hooks=hooks)
    p.r.pace.longest = 0.0
    t = p.read_in_thread(1)
    _wait(at_announce, "the reader's announcement")
    p.write(b"one")
    written.set()
    p.join(t)
    assert [g for g, _ in p.got] == [b"one"]
    assert p.got[0][1] < LATE, f"read {p.got[0][1]:.3f} s after the publish: wake-up lost"
    # the re-check found it: no block
    assert hooks.actions == [
        READER_POLL_READ_FLAG, READER_POLL_WRITTEN,  # the failed poll of claim()
        READER_ANNOUNCE_SLEEP, READER_POLL_READ_FLAG, READER_POLL_WRITTEN,  # the re-check
        READER_END_SLEEP, READER_READ_PAYLOAD, READER_RELEASE,
    ]


def test_publish_between_the_recheck_and_the_block(pair_factory: Callable[..., Pair]) -> None:
    """The reader announced and its re-check failed; the writer publishes, checks and
    wakes before the reader's futex wait begins: the wait must not block."""
    at_publish, at_block, written = threading.Event(), threading.Event(), threading.Event()
    reader_hooks = Hooks({
        READER_ANNOUNCE_SLEEP: lambda: _wait(at_publish, "the writer at WriterPublish"),
        READER_BLOCK: _set_then_wait(at_block, written, "the write"),
    })
    writer_hooks = Hooks({
        WRITER_PUBLISH: _set_then_wait(at_publish, at_block, "the reader at ReaderBlock"),
    })
    p = pair_factory(reader_hooks=reader_hooks, writer_hooks=writer_hooks)
    p.r.pace.longest = 0.0
    t = p.read_in_thread(1)
    p.write(b"two")
    written.set()
    p.join(t)
    assert [g for g, _ in p.got] == [b"two"]
    assert p.got[0][1] < LATE, f"read {p.got[0][1]:.3f} s after the publish: wake-up lost"
    assert reader_hooks.actions[2:6] == [
        READER_ANNOUNCE_SLEEP, READER_POLL_READ_FLAG, READER_POLL_WRITTEN, READER_BLOCK,
    ]


def _asleep(p: Pair) -> int:
    seg = SharedSegment.attach(p.ring.name, p.ring.layout.total_bytes)
    try:
        (word,) = struct.unpack_from("=I", seg.buf, p.ring.layout.sleep_offset(0))
        return int(word)
    finally:
        seg.close()


def test_a_blocked_reader_is_woken_by_each_publish(pair_factory: Callable[..., Pair]) -> None:
    """Idle long enough to block (its word is 1), the reader gets each message at once."""
    p = pair_factory()
    assert p.r.sleeper is p.r
    t = p.read_in_thread(3)
    for n in range(3):
        wait_blocked(t, HOLD)  # inside its wait, asleep in the kernel: in its futex
        assert _asleep(p) == 1, f"blocked before message {n}, yet its sleep word is 0"
        p.write(b"m:%d" % n)
    p.join(t)
    assert [g for g, _ in p.got] == [b"m:0", b"m:1", b"m:2"]
    late = [round(s, 3) for _, s in p.got]
    assert all(s < LATE for s in late), f"seconds from publish to read: {late}"
    assert _asleep(p) == 0


def test_a_signal_in_the_wake_up_still_wakes_the_reader(pair_factory: Callable[..., Pair]) -> None:
    """SIGINT reaches the writer (main thread) in its wake-up, right before it copies the
    sleep words (ReaderWake.tla: WriterInterruptedInWake): KeyboardInterrupt leaves the
    write, the message is published, and the blocked reader is woken for it at once.
    Before, nothing woke it: it read the message when its block's bound ran out."""
    def interrupt() -> None:
        os.kill(os.getpid(), signal.SIGINT)  # delivered at this call's return, in the hook

    writer_hooks = Hooks({WRITER_CHECK_SLEEP: interrupt})
    p = pair_factory(writer_hooks=writer_hooks)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        t = p.read_in_thread(2)
        wait_blocked(t, HOLD)
        assert _asleep(p) == 1
        with pytest.raises(KeyboardInterrupt):
            p.write(b"one")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert writer_hooks.actions[-2:] == [WRITER_PUBLISH, WRITER_CHECK_SLEEP]
    deadline = time.monotonic() + LATE
    while not p.got and time.monotonic() < deadline:  # the reader's own record of "one"
        time.sleep(0.001)
    assert p.got, f"'one' not read {LATE} s after its publish: the interrupt lost the wake"
    p.write(b"two")
    p.join(t)
    assert [g for g, _ in p.got] == [b"one", b"two"]
    late = [round(s, 3) for _, s in p.got]
    assert late[0] < LATE, f"read {late[0]} s after the publish: the interrupt lost the wake"


def test_the_writer_pays_no_syscall_while_no_reader_sleeps(
    pair_factory: Callable[..., Pair], monkeypatch: pytest.MonkeyPatch
) -> None:
    wakes: list[int] = []
    monkeypatch.setattr(cursors_module, "futex_wake", wakes.append)
    p = pair_factory()
    for n in range(5):
        p.write(b"x%d" % n)
        with p.r.acquire_read(0) as buf:
            assert bytes(buf[STAMP.size : STAMP.size + 2]) == b"x%d" % n
    assert wakes == []


def test_a_sleeping_wait_still_times_out_and_clears_its_word(
    pair_factory: Callable[..., Pair],
) -> None:
    p = pair_factory()
    t0 = time.monotonic()
    with pytest.raises(RingTimeoutError, match=r"reader 0 .* timed out after 0\.[3-9]"):
        p.r.acquire_read(0.3)
    assert 0.3 <= time.monotonic() - t0 < 0.3 + LATE
    assert _asleep(p) == 0


def test_the_watch_runs_while_the_reader_sleeps(pair_factory: Callable[..., Pair]) -> None:
    """Every block is bounded by the next watch (WATCH_INTERVAL, 0.1 s), not by max_block
    (5 s here, which would allow one call)."""
    p = pair_factory()
    calls: list[float] = []
    with pytest.raises(RingTimeoutError):
        wait_for(
            p.r.poll, Deadline.after(0.55), lambda: StallLog(lambda: "", 1e9),
            lambda s: RingTimeoutError(f"{s}"), lambda: calls.append(time.monotonic()),
            p.r.sleeper,
        )
    assert 3 <= len(calls) <= 7, calls  # 5 on an idle machine


def test_wake_on_publish_false_sleeps_doubling() -> None:
    with ShmRingBuffer(1, 64, 2) as ring, ShmRingBuffer.attach(ring.handle()) as readers:
        w = ring.writer()
        r = readers.reader(0, wake_on_publish=False)
        assert r.sleeper is None

        main = threading.current_thread()

        def write() -> None:
            wait_blocked(main, HOLD)  # the reader sleeps (doubling) inside its wait
            with w.acquire_write(HOLD) as buf:
                buf[:4] = b"late"

        writer = threading.Thread(target=write)
        writer.start()
        with r.acquire_read(HOLD) as buf:
            assert bytes(buf[:4]) == b"late"
        writer.join(HOLD)
        assert ring.views.sleep_words[0] == 0  # never announced


def _idle_reader(handle: Any) -> None:
    with ShmRingBuffer.attach(handle) as ring:
        r = ring.reader(0)
        r.max_block = BOUND
        for _ in range(3):
            with r.acquire_read(3 * BOUND) as buf:
                (stamp,) = STAMP.unpack_from(buf)
                channel().send(time.monotonic_ns() - stamp)


def test_a_reader_process_is_woken_across_processes() -> None:
    """The futex is the shared (non-private) kind: a reader in another process wakes."""
    with ShmRingBuffer(1, 64, 2) as ring:
        w = ring.writer()
        with Supervisor([Task(_idle_reader, (ring.handle(),), name="reader")]) as run:
            late = []
            for _ in range(3):
                # idle: the reader blocks in its futex (a spawned process may take long
                # to start)
                wait_blocked(ReaderAsleep(ring, 0, pid=run.pid("reader")), 3 * BOUND)
                with w.acquire_write(HOLD) as buf:
                    STAMP.pack_into(buf, 0, time.monotonic_ns())
                late.append(run.channel("reader").recv(3 * BOUND) / 1e9)
            assert all(s < LATE for s in late), f"seconds from publish to read: {late}"
            (outcome,) = run.wait(HOLD)
        assert outcome.ok, outcome.describe()


def test_a_signal_ends_the_block_at_once(pair_factory: Callable[..., Pair]) -> None:
    """SIGINT while the reader blocks in the futex (main thread): KeyboardInterrupt now,
    not after its block bound, and the word is cleared on the way out."""
    p = pair_factory()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    main = threading.current_thread()
    sent: list[float] = []

    def interrupt() -> None:
        wait_blocked(main, HOLD)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    killer = threading.Thread(target=interrupt)
    killer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            p.r.acquire_read(3 * BOUND)
    finally:
        killer.join(HOLD)
        signal.signal(signal.SIGINT, previous)
    assert sent and time.monotonic() - sent[0] < LATE
    assert _asleep(p) == 0


def test_a_cut_between_the_recheck_and_the_block_ends_the_block_at_once(
    pair_factory: Callable[..., Pair],
) -> None:
    """``cut_sleep`` (a reader's ``shutdown()`` from another thread) lands after the
    reader's failed re-check, before its futex wait: the wait must not block. Before,
    the cut only woke, so this wake was lost and the block ran to its bound."""
    reader_hooks = Hooks({})
    p = pair_factory(reader_hooks=reader_hooks)
    reader_hooks.hooks[READER_BLOCK] = p.r.cut_sleep  # the cut, right before the wait
    p.r.pace.longest = 0.0
    t0 = time.monotonic()
    assert p.r.sleep(lambda: False, BOUND) is False
    assert time.monotonic() - t0 < LATE, "the cut's wake was lost: the block ran its bound"
    assert _asleep(p) == 0


def test_a_signal_in_the_cut_still_wakes_the_reader(pair_factory: Callable[..., Pair]) -> None:
    """A signal lands in ``shutdown()``'s store of what the reader is to see (CutterSetStop,
    called from the main thread): the exception leaves the cut, and the blocked reader is
    woken all the same. Before, the clear and the wake were skipped and the reader slept
    to its block's bound."""
    woken: list[float] = []
    at_block = threading.Event()

    class BlockEnds(Hooks):
        def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
            if action == READER_BLOCK:
                woken.append(time.monotonic())

    p = pair_factory(reader_hooks=BlockEnds({READER_BLOCK: at_block.set}))
    p.r.pace.longest = 0.0
    t = p.read_in_thread(1)
    _wait(at_block, "the reader at its futex wait")  # the cut's clear or wake ends it

    def stop() -> None:
        os.kill(os.getpid(), signal.SIGINT)  # delivered at this call's return

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            p.r.cut_sleep(stop)
        cut = time.monotonic()
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = cut + LATE
    while not woken and time.monotonic() < deadline:  # the reader's own record of its wake
        time.sleep(0.001)
    assert woken and woken[0] - cut < LATE, "the cut's wake was skipped: the block ran on"
    p.write(b"end")
    p.join(t)
    assert [g for g, _ in p.got] == [b"end"]


class _CountingSleeper:
    """A Sleeper on a fake clock: each block lasts its whole bound, or ends at once for
    the blocks listed in ``woken``; it records each block's bound (seconds)."""

    spin_seconds = 0.0
    max_block = 0.1
    max_idle_block = 1.0

    def __init__(self, clock: list[float], woken: tuple[int, ...] = ()) -> None:
        self.clock = clock
        self.woken = woken
        self.bounds: list[float] = []

    def sleep(self, poll: Callable[[], bool], timeout: float) -> bool:
        if len(self.bounds) not in self.woken:
            self.clock[0] += timeout
        self.bounds.append(timeout)
        return False


@pytest.mark.parametrize(
    ("woken", "bounds"),
    [
        ((), [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]),
        # a block a wake ended early with nothing ready: the next starts over
        ((4,), [0.1, 0.2, 0.4, 0.8, 1.0, 0.1, 0.2, 0.4]),
    ],
)
def test_an_idle_wait_doubles_its_block_up_to_max_idle_block(
    woken: tuple[int, ...], bounds: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block of one wait may last twice the one before, from max_block up to
    max_idle_block: a reader idle for seconds wakes once a second, not ten times."""
    clock = [1000.0]
    monkeypatch.setattr(waiting, "_monotonic", lambda: clock[0])
    sleeper = _CountingSleeper(clock, woken)
    polls = iter([False] * 7 + [True])
    wait_for(
        lambda: next(polls), Deadline.after(None), lambda: StallLog(lambda: "", 1e9),
        lambda s: RingTimeoutError(f"{s}"), None, sleeper,
    )
    # each block is followed by one poll: the 8th's is the first true one
    assert sleeper.bounds == bounds


def test_an_idle_reader_blocks_a_handful_of_times(
    pair_factory: Callable[..., Pair], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real reader idle for 3.2 s: blocks of 0.1, 0.2, 0.4, 0.8 and 1 s, then the rest
    to its deadline (before, one block per 0.1 s: 32)."""
    p = pair_factory()
    p.r.max_block = MAX_BLOCK
    blocks: list[float] = []
    real_wait = futex_wait

    def counting(address: int, expected: int, timeout: float) -> None:
        blocks.append(timeout)
        real_wait(address, expected, timeout)

    monkeypatch.setattr(cursors_module, "futex_wait", counting)
    with pytest.raises(RingTimeoutError):
        p.r.acquire_read(3.2)
    assert blocks[:5] == [0.1, 0.2, 0.4, 0.8, 1.0], blocks
    assert 6 <= len(blocks) <= 7, blocks  # the last one or two: what is left to 3.2 s
