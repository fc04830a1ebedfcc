"""The writer's two transmitters (Agrona's split): the ring side and the TCP side.

A :class:`LocalTransmitter` owns what local readers read: the ring and its
writer cursor, the local ipc socket (:class:`~.flavors.overflow.FrameSender`)
and the tensor arena; a message too large for one chunk goes to the writer's
large-object flavor (:class:`~.flavors.LargeSender`), lent per call. A
:class:`RemoteTransmitter` owns what remote readers read: the CURVE XPUB, the
acknowledgement PULL and the credit they return. Each is built whole or not at
all (a failure releases what it made), and every field is set once.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from time import monotonic
from typing import Any

import zmq

from .. import native
from ..arena import ArenaWriter
from ..errors import MisuseError, require_int
from ..layout import RingLayout
from ..ring import ShmRingBuffer, WriterCursor
from ..steps import (
    WRITER_ACTOR,
    WRITER_INTERRUPTED_AFTER_PUBLISH,
    WRITER_PUBLISH_CHUNK,
    WRITER_SEND_REMOTE_FRAME,
    QueueObserver,
)
from ..waiting import Deadline
from . import wire
from .credit import RemoteCredit
from .curve import DEFAULT_HEARTBEAT_TIMEOUT, GATE, new_keys
from .flavors import LargeSender
from .flavors.overflow import FrameSender
from .sockets import LocalEndpoint, ack_pull, hwm_for_window, remote_xpub, send_frames

_chunk_bytes = wire.chunk_bytes  # bound once: the hot path pays no lookups
_encode_chunk = wire.encode_chunk

DEFAULT_REMOTE_WINDOW = 1024
#: The largest window: 2 * (window + control messages) + 1 stays a C int.
MAX_REMOTE_WINDOW = 2**29
#: How long the writer's close() lets queued frames drain to readers.
DEFAULT_LINGER = 5.0


@dataclass(frozen=True)
class RemoteOptions:
    """The remote channel: at most ``window`` messages un-acknowledged per remote
    reader (:mod:`.credit`); ``close()`` lets frames drain for ``linger`` seconds; a
    connection silent for ``heartbeat_timeout`` seconds (a dead host or link) is
    closed, and its peer named."""

    window: int = DEFAULT_REMOTE_WINDOW
    linger: float = DEFAULT_LINGER
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT

    def __post_init__(self) -> None:
        require_int("remote_window", self.window)
        if self.window > MAX_REMOTE_WINDOW:
            raise MisuseError(
                f"remote_window must be at most {MAX_REMOTE_WINDOW} (ZeroMQ's high-water "
                f"mark of twice the window must fit its int), got {self.window!r}"
            )
        _check_seconds("linger", self.linger, 0.0)
        _check_seconds("heartbeat_timeout", self.heartbeat_timeout, MIN_HEARTBEAT_TIMEOUT)

    @property
    def linger_ms(self) -> int:
        return int(self.linger * 1000)


#: The shortest heartbeat timeout: a few round trips of a loaded host.
MIN_HEARTBEAT_TIMEOUT = 0.1


def _check_seconds(name: str, value: object, least: float) -> None:
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not least <= float(value) < math.inf):
        raise MisuseError(f"{name} must be a finite number of seconds >= {least}, got {value!r}")


class LocalTransmitter:
    """The ring side: one claim and one publish per chunk; frames after markers."""

    def __init__(
        self, ctx: zmq.Context[Any], layout: RingLayout, observer: QueueObserver | None,
        who: str,
    ) -> None:
        ring = ShmRingBuffer(layout.n_reader, layout.max_chunk_bytes, layout.max_chunks)
        try:
            self.cursor: WriterCursor = ring.writer()
            self.frames = FrameSender(
                LocalEndpoint(ctx, hwm_for_window(layout.max_chunks + 1)), who
            )
        except BaseException:
            ring.close()
            raise
        self.ring = ring
        #: When each chunk was last published, for the writer's stall line (not shared).
        self.cursor.published_at = self.published_at = [0.0] * layout.max_chunks
        self._fits = layout.fits
        self.observer = observer
        #: The tensor arena: set at most once, by the writer as it is built.
        self.arena: ArenaWriter | None = None
        #: The last message published: (its seq, inline or not; -1: none yet), also when
        #: an asynchronous exception landed right after its publish store.
        self.published = (-1, True)
        #: The message whose publish was last begun: (seq, inline, chunk), stored before
        #: the publish store and never cleared: while its seq is the writer's next, the
        #: writer did not finish that call's bookkeeping (an interrupt cut it, maybe a
        #: second one its handling), and its next call settles it (``CutCalls``).
        self.committing = (-1, True, 0)
        #: The common path in one C call (:mod:`verifiedring.native`); None: the Python
        #: steps (also whenever an observer watches the queue's steps).
        self._native_publish = (
            native.writer_step(self.cursor, layout.n_reader) if observer is None else None
        )

    def publish(
        self, seq: int, p: wire.Pickled, deadline: Deadline, watch: Callable[[], None],
        obj: Any, large: LargeSender,
    ) -> bool:
        """Message ``seq`` into the ring: inline if it fits one chunk, else by the
        large-object flavor ``large`` (true: its frame must follow). Raises
        :class:`RingTimeoutError` if the first chunk is not free in time, and
        :class:`SharedMemoryFullError` if its pages cannot be reserved (nothing
        stored: the message is not sent); ``watch`` is called while it waits."""
        size = _chunk_bytes(p)
        if not self._fits(size):
            return large.send(seq, p, deadline, watch, obj)
        self.publish_chunk(seq, p, True, size, deadline, watch, obj)
        return False

    def publish_chunk(
        self, seq: int, p: wire.Pickled, inline: bool, stored: int, deadline: Deadline,
        watch: Callable[[], None], obj: Any,
    ) -> None:
        """Message ``seq`` into one chunk: ``p`` whole (``inline``), or its overflow
        marker (the socket flavor's :class:`~.flavors.overflow.MarkerSender`). The
        ``stored`` bytes' pages are reserved before the claim."""
        native_publish = self._native_publish
        if native_publish is not None and inline and not p[1] and native_publish(
            self, seq, p[0], stored
        ):
            return  # the steps below in one call (False: it stored nothing)
        cursor = self.cursor  # claim()'s steps inline: the hot path pays one call less
        # spec: WriterInterruptedBeforePublish -- a chunk a cut call left claimed is let go
        if cursor.holding:
            cursor.abort()  # a call cut between its fill and its publish: nothing is out
        cursor.claim(deadline, watch, stored)
        self.commit(cursor.fill(), seq, p, inline, obj)

    def claim(self, deadline: Deadline, watch: Callable[[], None]) -> memoryview:
        """The next chunk, claimed and held (:meth:`commit` publishes it, :meth:`let_go`
        does not); :class:`RingTimeoutError` if it is not free by ``deadline``. Its
        whole payload is reserved first (a raw write may reach any byte of it)."""
        cursor = self.cursor
        if cursor.holding:
            cursor.abort()  # a call cut between its fill and its publish: nothing is out
        cursor.claim(deadline, watch)
        return cursor.fill()

    def commit(
        self, chunk: memoryview, seq: int, p: wire.Pickled | None, inline: bool, obj: Any
    ) -> None:
        """Publish the claimed ``chunk`` as message ``seq``: ``p`` encoded into it (inline
        or its overflow marker), or with ``p`` None its payload as written in place
        (RAW). A raise before the publish lets go of the chunk (KeyboardInterrupt too)."""
        cursor = self.cursor
        obs = self.observer
        i = cursor.index
        # spec: WriterPublishChunk -- the object inline, its overflow marker, or raw bytes
        try:
            if obs is not None:
                obs.begin(WRITER_ACTOR)
            if p is None:
                wire.stamp_raw(chunk, seq)
            else:
                _encode_chunk(chunk, seq, p, inline)
            self.committing = (seq, inline, i)  # the intent, before the store (no call)
            cursor.publish()
            self.published_at[i] = monotonic()  # a cut here: as one at publish's return
        except BaseException:
            if cursor.holding:  # encoding raised, or publish() was interrupted at its start
                cursor.abort()
            elif cursor.settle(i):  # interrupted after the publish store: it is out
                self.published = (seq, inline)
                if obs is not None:
                    obs.end(WRITER_ACTOR, WRITER_INTERRUPTED_AFTER_PUBLISH, seq, obj,
                            "inline" if inline else "overflow")
            raise
        self.published = (seq, inline)
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_PUBLISH_CHUNK, seq, obj,
                    "inline" if inline else "overflow")

    def let_go(self) -> None:
        """Give the claimed chunk back unpublished (``WriterAbort``: nothing is sent)."""
        self.cursor.abort()

    def after_handshake(self, reader_names: list[object]) -> None:
        """Every reader attached: no name is needed any more, so no crash leaves one."""
        self.ring.unlink()
        if self.arena is not None:
            self.arena.unlink()
        self.frames.endpoint.remove_directory()
        self.cursor.reader_names = reader_names

    def close(self, linger_ms: int) -> None:
        self.frames.endpoint.close(linger_ms)
        self.ring.close()
        if self.arena is not None:
            self.arena.close()


class RemoteTransmitter:
    """The TCP side: every message as a frame, within the remote readers' credit."""

    def __init__(
        self, ctx: zmq.Context[Any], ip: str, options: RemoteOptions, who: str
    ) -> None:
        self.keys = keys = new_keys(float(options.heartbeat_timeout))
        GATE.admit(ctx, keys)
        try:
            self.socket, self.address = remote_xpub(
                ctx, ip, hwm_for_window(options.window), keys
            )
            try:
                ack_sock, self.ack_address = ack_pull(ctx, ip, keys)
            except BaseException:
                self.socket.close(linger=0)
                raise
        except BaseException:
            GATE.revoke(keys)
            raise
        self.credit = RemoteCredit(ack_sock, options.window)
        self._who = who

    def send(self, parts: list[Any], what: str, seq: int, obs: QueueObserver | None) -> None:
        """Send ``parts`` (message ``seq``'s frame, or with ``obs`` None a control
        message); raises :class:`BrokenPeerError` if the socket stays full."""
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterSendRemoteFrame (credit reserved before the chunk)
        send_frames(self.socket, parts, what, self._who)
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_SEND_REMOTE_FRAME, seq)

    def close(self, linger_ms: int) -> None:
        self.socket.close(linger=linger_ms)
        self.credit.close()
        GATE.revoke(self.keys)

    def close_door(self) -> None:
        """After READY: a reader connecting from now on is refused at once, and told why."""
        GATE.close_door(self.keys)
