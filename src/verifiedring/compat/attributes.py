"""vLLM's ``MessageQueue`` and ``ShmRingBuffer``: subclasses of verifiedring's, carrying
vLLM's attributes, read-only, over the core's own state.

As pyzmq's sugar subclasses its backend, :class:`VllmQueue` (``compat.vllm.MessageQueue``)
subclasses :class:`verifiedring.queue.MessageQueue`: its constructor builds a
:class:`VllmWriter`, its ``create_from_handle`` a :class:`VllmLocalReader` or a
:class:`VllmRemoteReader` (its role map, :meth:`VllmQueue._role_classes`). Each is a
subclass of the core role *and* of :class:`VllmQueue`, so ``isinstance(q,
verifiedring.MessageQueue)`` holds and the core classes are never changed: importing this
module changes nothing for other users of the process. A core attribute of the same name
wins (the core role comes first in each class's MRO), as it did before:

==========================  =================================================
attribute                   value (vLLM's meaning)
==========================  =================================================
``_is_writer``,             the role, as ``is_writer`` / ``is_local_reader`` /
``_is_local_reader``,       ``is_remote_reader``
``_is_remote_reader``
``n_remote_reader``         ``n_reader - n_local_reader``
``handle``                  writer: its exported Handle; reader: the one it
                            attached with
``buffer``                  the ring (a :class:`VllmRingBuffer`); ``None`` at a
                            writer without local readers and a remote reader
``current_idx``             writer: the next chunk it writes; local reader:
                            the next chunk it reads; otherwise ``-1``
``local_reader_rank``       a local reader's index in ``local_reader_ranks``
                            (its read flag); otherwise ``-1``
``local_socket``            the local ipc XPUB (writer) / SUB (local reader)
``remote_socket``           the TCP XPUB (writer) / SUB (remote reader)
``tensor_arena``            the writer's / a local reader's tensor arena as a
                            ``ShmTensorArena`` (:mod:`.tensor_arena`)
``_spin_condition``         a local reader's :class:`.spin.SpinCondition` (read
                            first: plugged into its waits); the writer's
                            stand-in (with local readers); otherwise ``None``
==========================  =================================================

``VllmRingBuffer.get_metadata(idx)`` / ``get_data(idx)`` are context managers yielding
writable views of chunk ``idx``'s flag bytes (``written`` then one read flag per
reader, vLLM's layout) and its data bytes. Storing into them bypasses the protocol, as
in vLLM; they are for inspection. A queue's ring is shown as a :class:`VllmRingBuffer`
over the same state (:meth:`VllmRingBuffer.over`).

The subclasses read the state of the core role they extend (its ring, cursor and
sockets), so a rename there fails here at type-check time.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import weakref
from collections.abc import Iterator, Sized
from typing import Any

from ..errors import CancelledError, MisuseError, RingTimeoutError
from ..queue import Handle, readiness
from ..queue.local_reader import LocalReader
from ..queue.message_queue import MessageQueue, RoleClasses
from ..queue.remote_reader import RemoteReader
from ..queue.writer import QueueWriter
from ..ring import ShmRingBuffer
from ..shm import SharedSegment
from ..steps import QueueObserver
from . import spin
from .tensor_arena import ShmTensorArena, drop_facade, facade_of

__all__ = ["VllmLocalReader", "VllmQueue", "VllmRemoteReader", "VllmRingBuffer", "VllmWriter",
           "recv"]


class VllmRingBuffer(ShmRingBuffer):
    """vLLM's ``ShmRingBuffer``: verifiedring's, with vLLM's layout names."""

    @classmethod
    def over(cls, ring: ShmRingBuffer) -> VllmRingBuffer:
        """``ring`` as vLLM sees it: one instance per ring, sharing its state."""
        if isinstance(ring, VllmRingBuffer):
            return ring
        shown = _SHOWN.get(ring)
        if shown is None:
            shown = object.__new__(cls)
            shown.__dict__ = ring.__dict__  # the same ring: one state, two views of it
            _SHOWN[ring] = shown
        return shown

    n_reader = property(lambda self: self.layout.n_reader)
    max_chunk_bytes = property(lambda self: self.layout.max_chunk_bytes)
    max_chunks = property(lambda self: self.layout.max_chunks)
    metadata_size = property(lambda self: self.layout.flags_per_chunk)
    # vLLM's layout offsets, as this ring's (data of chunk 0, flags of chunk 0): the
    # segment is verifiedring's layout (sleep words first), never vLLM's
    total_bytes_of_buffer = property(lambda self: self.layout.total_bytes)
    data_offset = property(lambda self: self.layout.data_offset(0))
    metadata_offset = property(lambda self: self.layout.flags_offset(0))

    @property
    def shared_memory(self) -> SharedSegment:
        return self._segment

    @contextlib.contextmanager
    def get_data(self, idx: int) -> Iterator[memoryview]:
        """vLLM's view of chunk ``idx``'s data bytes."""
        self.layout.check_chunk(idx)
        with self.views.data[idx][:] as view:
            yield view

    @contextlib.contextmanager
    def get_metadata(self, idx: int) -> Iterator[memoryview]:
        """vLLM's view of chunk ``idx``'s flags: ``written``, then one read flag per reader."""
        self.layout.check_chunk(idx)
        with self.views.flags[idx][:] as view:
            yield view


_SHOWN: weakref.WeakKeyDictionary[ShmRingBuffer, VllmRingBuffer] = weakref.WeakKeyDictionary()


def recv(socket: Any, timeout: float | None) -> Any:
    """vLLM's static ``MessageQueue.recv``: the next multipart message on the zmq
    ``socket``, unpickled with its other parts as out-of-band buffers. ``timeout``
    in seconds (``None``: no bound; below 0: 0); nothing by then is a
    :class:`RingTimeoutError` (a ``TimeoutError``)."""
    timeout_ms = None if timeout is None else max(0, int(timeout * 1000))
    if not socket.poll(timeout=timeout_ms):
        raise RingTimeoutError(f"pid {os.getpid()}: no message on the socket in {timeout} s")
    first, *rest = socket.recv_multipart(copy=False)
    return pickle.loads(first, buffers=rest)


class VllmQueue(MessageQueue):
    """vLLM's ``MessageQueue``: the role-generic attributes (the table above)."""

    recv = staticmethod(recv)
    ReadTimeoutWithWarnings = spin.ReadTimeoutWithWarnings
    n_reader: int  # set by each core role
    n_local_reader: int

    @classmethod
    def _role_classes(cls) -> RoleClasses:
        return RoleClasses(VllmWriter, VllmLocalReader, VllmRemoteReader)

    @classmethod
    def create_from_handle(
        cls, handle: Handle, rank: int, *, observer: QueueObserver | None = None
    ) -> VllmQueue:
        """The core's (a reader of this role map), typed as vLLM's queue."""
        reader = super().create_from_handle(handle, rank, observer=observer)
        assert isinstance(reader, VllmQueue)  # _role_classes' readers are
        return reader

    _is_writer = property(lambda self: self.is_writer)
    _is_local_reader = property(lambda self: self.is_local_reader)
    _is_remote_reader = property(lambda self: self.is_remote_reader)
    n_remote_reader = property(lambda self: self.n_reader - self.n_local_reader)
    handle = property(lambda self: self._handle)
    buffer: Any = property(lambda self: None)
    current_idx = property(lambda self: -1)
    local_reader_rank = property(lambda self: -1)
    local_socket: Any = property(lambda self: None)
    remote_socket: Any = property(lambda self: None)
    tensor_arena: Any = property(lambda self: None)
    _spin_condition: Any = property(lambda self: None)

    def readable(self) -> bool:
        """``MessageQueue.readable`` as vLLM's dispatches it, for what reaches this class
        (the writer, or a stand-in with vLLM's role flags): a remote reader's socket polled
        with timeout 0; the writer raises. Each reader role has its own (``readiness``)."""
        if self.shutting_down:
            raise CancelledError(f"pid {os.getpid()}: readable() cancelled: shutdown() was called")
        if self._is_remote_reader:
            return bool(self.remote_socket.poll(timeout=0))
        raise MessageQueue._wrong_role(self, "readable()")

    def spin_until_readable(self, pending: Sized, deadline: float) -> None:
        """``MessageQueue.spin_until_readable`` as vLLM's dispatches it (see :meth:`readable`):
        a remote reader polls its socket for ``REMOTE_POLL_WAIT_MS``; the writer raises."""
        if self._is_remote_reader:
            self.remote_socket.poll(timeout=readiness.remote_poll_ms(deadline))
            return
        raise MessageQueue._wrong_role(self, "spin_until_readable()")


class VllmWriter(QueueWriter, VllmQueue):
    """vLLM's writer."""

    _spin: spin.WriterSpinCondition | None = None

    handle = property(lambda self: self.export_handle())

    @property
    def buffer(self) -> VllmRingBuffer | None:
        local = self._local
        return None if local is None else VllmRingBuffer.over(local.ring)

    @property
    def current_idx(self) -> int:
        return -1 if self._local is None else self._local.cursor.index

    @property
    def local_socket(self) -> Any:
        return None if self._local is None else self._local.frames.endpoint.socket

    @property
    def remote_socket(self) -> Any:
        return None if self._remote is None else self._remote.socket

    @property
    def tensor_arena(self) -> ShmTensorArena | None:
        return None if self._local is None else facade_of(self._local.arena)

    @property
    def _spin_condition(self) -> spin.WriterSpinCondition | None:
        if self._local is None:
            return None
        if self._spin is None:
            self._spin = spin.WriterSpinCondition()
        return self._spin


class VllmLocalReader(LocalReader, VllmQueue):
    """vLLM's local reader."""

    _spin: spin.SpinCondition | None = None
    _arena_dropped = False

    buffer = property(lambda self: VllmRingBuffer.over(self._ring))
    current_idx = property(lambda self: self._cursor.index)
    local_reader_rank = property(lambda self: self.local_reader_ranks.index(self.rank))
    local_socket = property(lambda self: self._path.socket)

    @property
    def _spin_condition(self) -> spin.SpinCondition:
        """The reader's SpinCondition, made and plugged into its waits on the first read."""
        if self._spin is None:
            self._spin = spin.SpinCondition.plug_into(self._cursor)
            self._path.on_read = self._spin.record_read
        return self._spin

    @property
    def tensor_arena(self) -> ShmTensorArena | None:
        return None if self._arena_dropped else facade_of(self._arena)

    @tensor_arena.setter
    def tensor_arena(self, value: Any) -> None:
        """``mq.tensor_arena = None`` (vLLM's way to drop the arena): the queue's arena
        stays (its messages still decode), but its ``ShmTensorArena`` is let go, so the
        ``_TENSOR_ARENAS`` entry vanishes once nothing else references it."""
        if value is not None:
            raise MisuseError(f"{self._who()}: tensor_arena can only be set to None")
        self._arena_dropped = True
        if self._arena is not None:
            drop_facade(self._arena)


class VllmRemoteReader(RemoteReader, VllmQueue):
    """vLLM's remote reader."""

    remote_socket = property(lambda self: self._path.socket)
