"""vLLM's ``MessageQueue`` and ``ShmRingBuffer``: subclasses of verifiedring's, carrying
vLLM's attributes, read-only, over the core's own state.

As pyzmq's sugar subclasses its backend, :class:`VllmQueue` (``compat.vllm.MessageQueue``)
subclasses :class:`verifiedring.queue.MessageQueue`: its constructor builds a
:class:`VllmWriter`, its ``create_from_handle`` a :class:`VllmLocalReader` or a
:class:`VllmRemoteReader` (its role map, :meth:`VllmEntry.roles`). Each is a
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

Every attribute reads the end's public read surface, :attr:`MessageQueue.parts
<verifiedring.queue.message_queue.MessageQueue.parts>` (its ring, cursor, sockets, arena
and per-message path): nothing here reads a private name of the core.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import weakref
from collections.abc import Iterator, Sized
from typing import Any

from ..errors import CancelledError, MisuseError, RingTimeoutError
from ..queue import readiness
from ..queue.local_path import LocalPath
from ..queue.local_reader import LocalReader
from ..queue.message_queue import EndParts, MessageQueue, QueueEntry, RoleClasses
from ..queue.remote_reader import RemoteReader
from ..queue.writer import QueueWriter
from ..ring import ReaderCursor, ShmRingBuffer
from . import spin
from .tensor_arena import drop_facade, facade_of

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

    shared_memory = property(lambda self: self.segment)

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


def _ring_view(ring: ShmRingBuffer | None) -> VllmRingBuffer | None:
    return None if ring is None else VllmRingBuffer.over(ring)


def _plugged(parts: EndParts) -> spin.SpinCondition:
    """A local reader's SpinCondition (plugged into its waits on the first read)."""
    cursor, path = parts.cursor, parts.path
    assert isinstance(cursor, ReaderCursor) and isinstance(path, LocalPath)
    return spin.SpinCondition.plugged_into(cursor, path)


def _drop_arena(queue: MessageQueue, value: Any) -> None:
    """``mq.tensor_arena = None`` (vLLM's way to drop the arena): the queue's arena stays
    (its messages still decode), but its ``ShmTensorArena`` is let go, so a reader's
    ``_TENSOR_ARENAS`` entry vanishes once nothing else references it; ``tensor_arena``
    is ``None`` from then on."""
    if value is not None:
        raise MisuseError(f"{queue!r}: tensor_arena can only be set to None")
    arena = queue.parts.arena
    if arena is not None:
        drop_facade(arena)


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


class VllmEntry(QueueEntry):
    """``compat.vllm.MessageQueue``'s entry: its constructor and ``create_from_*`` build
    vLLM's role classes."""

    def roles(cls) -> RoleClasses:
        return RoleClasses(VllmWriter, VllmLocalReader, VllmRemoteReader)


class VllmQueue(MessageQueue, metaclass=VllmEntry):
    """vLLM's ``MessageQueue``: the role-generic attributes (the table above)."""

    recv = staticmethod(recv)
    ReadTimeoutWithWarnings = spin.ReadTimeoutWithWarnings

    _is_writer = property(lambda self: self.is_writer)
    _is_local_reader = property(lambda self: self.is_local_reader)
    _is_remote_reader = property(lambda self: self.is_remote_reader)
    n_remote_reader = property(lambda self: self.n_reader - self.n_local_reader)
    handle = property(lambda self: self.export_handle())
    buffer = property(lambda self: _ring_view(self.parts.ring))
    current_idx = property(lambda self: -1 if (c := self.parts.cursor) is None else c.index)
    local_reader_rank = property(
        lambda self: self.local_reader_ranks.index(self.rank) if self.is_local_reader else -1)
    local_socket = property(lambda self: self.parts.local_socket)
    remote_socket = property(lambda self: self.parts.remote_socket)
    tensor_arena = property(lambda self: facade_of(self.parts.arena), _drop_arena)
    _spin_condition: Any = property(lambda self: None)

    def readable(self) -> bool:
        """``MessageQueue.readable`` as vLLM's dispatches it, for what reaches this class
        (the writer, or a stand-in with vLLM's role flags): a remote reader's socket polled
        with timeout 0; the writer raises. Each reader role has its own (``readiness``)."""
        if self.shutting_down:
            raise CancelledError(f"pid {os.getpid()}: readable() cancelled: shutdown() was called")
        if self._is_remote_reader:
            return bool(self.remote_socket.poll(timeout=0))
        return MessageQueue.readable(self)  # the writer: the core's refusal

    def spin_until_readable(self, pending: Sized, deadline: float) -> None:
        """``MessageQueue.spin_until_readable`` as vLLM's dispatches it (see :meth:`readable`):
        a remote reader polls its socket for ``REMOTE_POLL_WAIT_MS``; the writer raises."""
        if self._is_remote_reader:
            self.remote_socket.poll(
                timeout=readiness.remote_poll_ms(deadline, spin.remote_poll_wait_ms()))
            return
        MessageQueue.spin_until_readable(self, pending, deadline)  # the writer: refused


class VllmWriter(QueueWriter, VllmQueue):
    """vLLM's writer."""

    _spin: spin.WriterSpinCondition | None = None

    @property
    def _spin_condition(self) -> spin.WriterSpinCondition | None:
        if self._spin is None and self.n_local_reader:
            self._spin = spin.WriterSpinCondition()
        return self._spin


class VllmLocalReader(LocalReader, VllmQueue):
    """vLLM's local reader."""

    _spin_condition = property(lambda self: _plugged(self.parts))


class VllmRemoteReader(RemoteReader, VllmQueue):
    """vLLM's remote reader."""

    def poll_wait_ms(self) -> float:
        """compat's ``REMOTE_POLL_WAIT_MS``, read at each call (vLLM's tests patch it)."""
        return spin.remote_poll_wait_ms()
