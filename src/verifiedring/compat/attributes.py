"""vLLM's queue and ring attributes, read-only, over verifiedring's own state.

vLLM's code and tests read attributes of its ``MessageQueue`` and
``ShmRingBuffer`` that verifiedring's core does not need. :func:`add_vllm_attributes`
(run when :mod:`verifiedring.compat.vllm` is imported) adds them as properties to
the queue's role classes and the ring, each computed from the core's state, so
the core classes do not grow and nothing can drift out of step:

==========================  =================================================
attribute                   value (vLLM's meaning)
==========================  =================================================
``_is_writer``,             the role, as ``is_writer`` / ``is_local_reader`` /
``_is_local_reader``,       ``is_remote_reader``
``_is_remote_reader``
``n_remote_reader``         ``n_reader - n_local_reader``
``handle``                  writer: its exported Handle; reader: the one it
                            attached with
``buffer``                  the ring (:class:`ShmRingBuffer`); ``None`` at a
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

``ShmRingBuffer.get_metadata(idx)`` / ``get_data(idx)`` are context managers
yielding writable views of chunk ``idx``'s flag bytes (``written`` then one read
flag per reader, vLLM's layout) and its data bytes. Storing into them bypasses
the protocol, as in vLLM; they are for inspection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import MisuseError
from ..queue.local_reader import LocalReader
from ..queue.message_queue import MessageQueue
from ..queue.remote_reader import RemoteReader
from ..queue.writer import QueueWriter
from ..ring import ShmRingBuffer
from .spin import reader_spin_condition, writer_spin_condition
from .tensor_arena import facade_of

__all__ = ["add_vllm_attributes"]


def _role(flag: str) -> Callable[[MessageQueue], bool]:
    return lambda q: bool(getattr(q, flag))


def _writer_local(attr: Callable[[Any], Any], default: Any) -> Callable[[QueueWriter], Any]:
    """``attr`` of the writer's ring side, ``default`` without local readers."""
    return lambda w: default if w._local is None else attr(w._local)


_COMMON: dict[str, Callable[[Any], Any]] = {
    "_is_writer": _role("is_writer"),
    "_is_local_reader": _role("is_local_reader"),
    "_is_remote_reader": _role("is_remote_reader"),
    "n_remote_reader": lambda q: q.n_reader - q.n_local_reader,
    "handle": lambda q: q._handle,
    "buffer": lambda q: None,
    "current_idx": lambda q: -1,
    "local_reader_rank": lambda q: -1,
    "local_socket": lambda q: None,
    "remote_socket": lambda q: None,
    "tensor_arena": lambda q: None,
    "_spin_condition": lambda q: None,
}
_PER_ROLE: dict[type, dict[str, Callable[[Any], Any]]] = {
    QueueWriter: {
        "handle": lambda w: w.export_handle(),
        "buffer": _writer_local(lambda t: t.ring, None),
        "current_idx": _writer_local(lambda t: t.cursor.index, -1),
        "local_socket": _writer_local(lambda t: t.frames.endpoint.socket, None),
        "remote_socket": lambda w: None if w._remote is None else w._remote.socket,
        "tensor_arena": _writer_local(lambda t: facade_of(t.arena), None),
        "_spin_condition": lambda w: None if w._local is None else writer_spin_condition(w),
    },
    LocalReader: {
        "buffer": lambda r: r._ring,
        "current_idx": lambda r: r._cursor.index,
        "local_reader_rank": lambda r: r.local_reader_ranks.index(r.rank),
        "local_socket": lambda r: r._sock,
        "_spin_condition": reader_spin_condition,
    },
    RemoteReader: {"remote_socket": lambda r: r._sock},
}


@contextlib.contextmanager
def _get_data(ring: ShmRingBuffer, idx: int) -> Iterator[memoryview]:
    """vLLM's view of chunk ``idx``'s data bytes."""
    ring.layout.check_chunk(idx)
    with ring.views.data[idx][:] as view:
        yield view


@contextlib.contextmanager
def _get_metadata(ring: ShmRingBuffer, idx: int) -> Iterator[memoryview]:
    """vLLM's view of chunk ``idx``'s flags: ``written``, then one read flag per reader."""
    ring.layout.check_chunk(idx)
    with ring.views.flags[idx][:] as view:
        yield view


_RING: dict[str, Callable[[ShmRingBuffer], Any]] = {
    "n_reader": lambda b: b.layout.n_reader,
    "max_chunk_bytes": lambda b: b.layout.max_chunk_bytes,
    "max_chunks": lambda b: b.layout.max_chunks,
    "metadata_size": lambda b: b.layout.flags_per_chunk,
    # vLLM's layout offsets, as this ring's (data of chunk 0, flags of chunk 0): the
    # segment is verifiedring's layout (sleep words first), never vLLM's
    "total_bytes_of_buffer": lambda b: b.layout.total_bytes,
    "data_offset": lambda b: b.layout.data_offset(0),
    "metadata_offset": lambda b: b.layout.flags_offset(0),
    "shared_memory": lambda b: b._segment,
}


def _reader_arena(r: LocalReader) -> Any:
    return None if vars(r).get("_vllm_arena_dropped") else facade_of(r._arena)


def _drop_reader_arena(r: LocalReader, value: Any) -> None:
    """``mq.tensor_arena = None`` (vLLM's way to drop the arena): the queue's arena stays
    (its messages still decode), but its ``ShmTensorArena`` is let go, so the
    ``_TENSOR_ARENAS`` entry vanishes once nothing else references it."""
    if value is not None:
        raise MisuseError(f"{r._who()}: tensor_arena can only be set to None")
    vars(r)["_vllm_arena_dropped"] = True
    if r._arena is not None:
        r._arena.facade = None


#: Attributes vLLM's callers assign: (getter, setter), per class.
_SETTABLE: dict[type, dict[str, tuple[Callable[[Any], Any], Callable[[Any, Any], None]]]] = {
    LocalReader: {"tensor_arena": (_reader_arena, _drop_reader_arena)},
}


def add_vllm_attributes() -> None:
    """Add vLLM's attributes (the tables above) to the queue classes and the ring.
    Idempotent; a name a class defines itself is never replaced."""
    tables = ((MessageQueue, _COMMON), *_PER_ROLE.items(), (ShmRingBuffer, _RING))
    for cls, table in tables:
        for name, get in table.items():
            if name not in cls.__dict__:
                setattr(cls, name, property(get))
    for cls, settable in _SETTABLE.items():
        for name, (get, put) in settable.items():
            setattr(cls, name, property(get, put))
    for name, call in (("get_data", _get_data), ("get_metadata", _get_metadata)):
        if name not in ShmRingBuffer.__dict__:
            setattr(ShmRingBuffer, name, call)
