"""Fault seams for tests: the one place allowed to reach a queue end's internals.

A test that must hold back, fail or forge what a queue end sends, or look at
the ring chunk a message went to, calls one of these instead of editing a
private field. Each names what it does to the real object; none changes the
protocol, and each undoes itself where it can (``with`` or :meth:`restore`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import zmq

from .. import arena as _arena
from ..arena import ArenaReader, ArenaWriter
from ..errors import MisuseError
from ..layout import WRITTEN_POSITION
from ..queue import wire
from ..queue.local_reader import LocalReader
from ..queue.message_queue import MessageQueue
from ..queue.reader import QueueReader
from ..queue.serialization import Serializer
from ..queue.writer import QueueWriter
from ..ring import ReaderCursor, ShmRingBuffer
from ..steps import StepObserver

__all__ = [
    "LocalFrames",
    "arena_of",
    "before_arena_fences",
    "before_local_frame",
    "forge_chunk",
    "hold_local_frames",
    "interrupt_writer_wait",
    "local_frames",
    "look_at_socket_next",
    "observe_cursor",
    "reader_cursor",
    "reader_socket",
    "reader_transitions",
    "ring_chunk",
    "send_frame",
    "wedge_local_socket",
    "writer_ring",
    "writer_run",
    "writer_sockets",
]


def _writer(end: MessageQueue) -> QueueWriter:
    if not isinstance(end, QueueWriter):
        raise MisuseError(f"{end!r} is not a writer")
    return end


def _local_reader(end: MessageQueue) -> LocalReader:
    if not isinstance(end, LocalReader):
        raise MisuseError(f"{end!r} is not a local reader")
    return end


def _local_side(writer: MessageQueue) -> Any:
    local = _writer(writer)._local
    if local is None:
        raise MisuseError(f"{writer!r} has no local readers")
    return local


class LocalFrames:
    """The writer's local socket, wrapped: frames held back while :attr:`holding`,
    every send failing as at the high-water mark while :attr:`wedged`, and
    :attr:`before_send` called with each frame first. :meth:`restore` (or leaving
    ``with``) puts the real socket back."""

    def __init__(self, writer: MessageQueue) -> None:
        self._frames = _local_side(writer).frames
        self.sock: zmq.Socket[Any] = self._frames.socket
        self.holding = False
        self.wedged = False
        self.held: list[list[Any]] = []
        self.before_send: Callable[[list[Any]], None] | None = None
        self._frames.socket = self

    def send_multipart(self, parts: list[Any], flags: int = 0, copy: bool = True) -> None:
        if self.before_send is not None:
            self.before_send(parts)
        if self.wedged:
            raise zmq.Again()
        if self.holding:
            self.held.append(parts)
        else:
            self.sock.send_multipart(parts, flags, copy=copy)

    def release(self) -> None:
        """Send the frames held back, in order."""
        for parts in self.held:
            self.sock.send_multipart(parts)
        self.held.clear()

    def restore(self) -> None:
        self._frames.socket = self.sock

    def __enter__(self) -> LocalFrames:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def local_frames(writer: MessageQueue) -> LocalFrames:
    """The writer's local sends, wrapped (passing through until told otherwise)."""
    return LocalFrames(writer)


def hold_local_frames(writer: MessageQueue) -> LocalFrames:
    """Hold back every frame of the writer's local socket (overflow frames, READY,
    SHUTDOWN) until :meth:`LocalFrames.release`."""
    frames = LocalFrames(writer)
    frames.holding = True
    return frames


def wedge_local_socket(writer: MessageQueue) -> LocalFrames:
    """Make every send on the writer's local socket fail as at its high-water mark."""
    frames = LocalFrames(writer)
    frames.wedged = True
    return frames


def before_local_frame(writer: MessageQueue, hook: Callable[[], None]) -> LocalFrames:
    """Call ``hook`` right before each overflow frame is sent (its marker published)."""
    frames = LocalFrames(writer)

    def check(parts: list[Any]) -> None:
        if wire.read_header(parts[0])[0] == wire.OVERFLOW:
            hook()

    frames.before_send = check
    return frames


def writer_sockets(writer: MessageQueue) -> tuple[zmq.Socket[Any] | None, zmq.Socket[Any] | None]:
    """The writer's local and remote XPUBs (``None`` where it has no such readers)."""
    w = _writer(writer)
    local = None if w._local is None else w._local.frames.endpoint.socket
    remote = None if w._remote is None else w._remote.socket
    return local, remote


def reader_socket(reader: MessageQueue) -> zmq.Socket[Any]:
    """The socket a reader receives frames on."""
    if not isinstance(reader, QueueReader):
        raise MisuseError(f"{reader!r} is not a reader")
    return reader._path.socket


def reader_transitions(reader: MessageQueue) -> set[Any]:
    """The (from, to) state moves a reader took since built with an observer (each is
    checked against ``READER_TRANSITIONS`` as it is taken)."""
    if not isinstance(reader, QueueReader):
        raise MisuseError(f"{reader!r} is not a reader")
    seen = reader._life.seen
    if seen is None:
        raise MisuseError(f"{reader!r} was built without an observer: nothing is checked")
    return seen


def send_frame(writer: MessageQueue, channel: str, parts: list[Any]) -> None:
    """Send ``parts`` on the writer's ``"local"`` or ``"remote"`` socket as the writer
    would (authentic), outside any message."""
    w = _writer(writer)
    if channel == "local":
        _local_side(w).frames.send(parts, "a stray frame", -1, None)
    elif w._remote is not None:
        w._remote.send(parts, "a stray frame", -1, None)
    else:
        raise MisuseError(f"{writer!r} has no remote readers")


def forge_chunk(writer: MessageQueue, seq: int, obj: Any, timeout: float | None = None) -> None:
    """Publish ``obj`` inline in the writer's next ring chunk as message ``seq``,
    outside the writer's sequence (as if messages were lost)."""
    cursor = _local_side(writer).cursor
    with cursor.acquire_write(timeout) as chunk:
        wire.encode_chunk(chunk, seq, Serializer().dumps(obj), True)


def writer_ring(writer: MessageQueue) -> ShmRingBuffer:
    """The writer's ring (it has local readers)."""
    ring: ShmRingBuffer = _local_side(writer).ring
    return ring


def ring_chunk(writer: MessageQueue, index: int) -> tuple[int, int, int]:
    """``(written flag, kind, seq)`` of ring chunk ``index`` as the writer sees it."""
    ring = writer_ring(writer)
    written = ring.views.flags[index][WRITTEN_POSITION]
    kind, seq = wire.read_header(ring.views.data[index])[:2]
    return written, kind, seq


def observe_cursor(end: MessageQueue, observer: StepObserver | None) -> None:
    """Make ``observer`` see every ring step of ``end``'s cursor (the writer's, with local
    readers, or a local reader's); ``None`` stops it."""
    cursor = _local_side(end).cursor if end.is_writer else _local_reader(end)._cursor
    cursor.observer = observer


def reader_cursor(reader: MessageQueue) -> ReaderCursor:
    """A local reader's ring cursor."""
    cursor: ReaderCursor = _local_reader(reader)._cursor
    return cursor


@contextlib.contextmanager
def replace_reader_cursor(reader: MessageQueue, cursor: Any) -> Iterator[None]:
    """While inside, a local reader's dequeue waits on and takes from ``cursor`` (a
    wrapper of :func:`reader_cursor`'s, say)."""
    path = _local_reader(reader)._path
    real = path._cursor
    path._cursor = cursor
    try:
        yield
    finally:
        path._cursor = real


def look_at_socket_next(reader: MessageQueue) -> None:
    """A local reader waiting on the ring drains its socket at its next failed poll,
    however recent its last look (as its writer watch makes it when the writer is lost)."""
    _local_reader(reader)._path._control.look_now()


def next_seq(writer: MessageQueue) -> int:
    """The sequence number the writer's next message carries."""
    return _writer(writer)._life.seq


def skip_to_seq(writer: MessageQueue, seq: int) -> None:
    """Make the writer's next message carry ``seq`` (a writer that skipped or reused
    numbers: a defect). The record of the publish last begun is forgotten too: a
    writer that lost count of its numbers, not one whose call an interrupt cut (whose
    next call settles that publish)."""
    end = _writer(writer)
    end._life.advance(seq)
    if end._local is not None:
        end._local.committing = (-1, True, 0)


def writer_transitions(writer: MessageQueue) -> set[Any]:
    """The (from, to) state moves the writer took since built with an observer (each is
    checked against ``WRITER_TRANSITIONS`` as it is taken)."""
    seen = _writer(writer)._life.seen
    if seen is None:
        raise MisuseError(f"{writer!r} was built without an observer: nothing is checked")
    return seen


def writer_run(writer: MessageQueue) -> Any:
    """The stream-mode writer's :class:`~..queue.flavors.run.writer.RunWriter`."""
    runs = _writer(writer)._path._runs
    if runs is None:
        raise MisuseError(f"{writer!r} does not stream large objects")
    return runs.run


def run_holds_object(writer: MessageQueue) -> bool:
    """Whether the stream-mode writer's run still holds a reference to an object."""
    return writer_run(writer)._obj is not None


@contextlib.contextmanager
def interrupt_writer_wait(
    writer: MessageQueue, when: Callable[[], bool], exc: type[BaseException] = KeyboardInterrupt
) -> Iterator[None]:
    """While inside, the writer's waits (for room, for credit) raise ``exc`` the
    first time ``when()`` is true, as an asynchronous exception would land there."""
    path = _writer(writer)._path
    watch = path._watch
    fired = False

    def interrupting() -> None:
        nonlocal fired
        if not fired and when():
            fired = True
            raise exc
        watch()

    path._watch = interrupting
    try:
        yield
    finally:
        path._watch = watch


def arena_of(end: MessageQueue) -> ArenaWriter | ArenaReader | None:
    """The tensor arena of a writer or a local reader (``None`` without one)."""
    if isinstance(end, QueueWriter):
        return None if end._local is None else end._local.arena
    return _local_reader(end)._arena


@contextlib.contextmanager
def before_arena_fences(hook: Callable[[], None]) -> Iterator[None]:
    """While inside, every fence of the tensor arena (FA1-FA5 in ``arena.py``: the
    writer's claim, a reader's sweep, a view's release) calls ``hook()`` first, in the
    thread that runs it (a test pauses one thread there)."""
    names = vars(_arena)  # arena.py calls its module-level ``fence``
    real: Callable[[], None] = names["fence"]

    def hooked() -> None:
        hook()
        real()

    names["fence"] = hooked
    try:
        yield
    finally:
        names["fence"] = real
