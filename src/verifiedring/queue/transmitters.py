"""The writer's two transmitters (Agrona's split): the ring side and the TCP side.

A :class:`LocalTransmitter` owns what local readers read: the ring and its
writer cursor, the local ipc socket (:class:`~.flavors.overflow.FrameSender`),
the large-object flavor (overflow frames, or runs) and the tensor arena. A
:class:`RemoteTransmitter` owns what remote readers read: the CURVE XPUB, the
acknowledgement PULL and the credit they return. Each is built whole or not at
all (a failure releases what it made), and every field is set once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from ..arena import ArenaWriter
from ..errors import require_int
from ..layout import RingLayout
from ..ring import ShmRingBuffer, WriterCursor
from ..steps import (
    WRITER_ACTOR,
    WRITER_PUBLISH_CHUNK,
    WRITER_SEND_REMOTE_FRAME,
    QueueObserver,
)
from ..waiting import Deadline
from . import wire
from .credit import RemoteCredit
from .curve import GATE, new_keys
from .flavors.overflow import FrameSender
from .flavors.run.writer import RunSender
from .sockets import LocalEndpoint, ack_pull, hwm_for_window, remote_xpub, send_frames

_chunk_bytes = wire.chunk_bytes  # bound once: the hot path pays no lookups
_encode_chunk = wire.encode_chunk
_HEADER_BYTES = wire.HEADER_BYTES

DEFAULT_REMOTE_WINDOW = 1024
#: How long the writer's close() lets queued frames drain to readers.
DEFAULT_LINGER = 5.0


@dataclass(frozen=True)
class RemoteOptions:
    """The remote channel: at most ``window`` messages un-acknowledged per remote
    reader (:mod:`.credit`); ``close()`` lets frames drain for ``linger`` seconds."""

    window: int = DEFAULT_REMOTE_WINDOW
    linger: float = DEFAULT_LINGER

    def __post_init__(self) -> None:
        require_int("remote_window", self.window)

    @property
    def linger_ms(self) -> int:
        return int(self.linger * 1000)


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
        self._fits = layout.fits
        self.observer = observer
        #: The run flavor (``large_objects="stream"``), else overflow frames; and the
        #: tensor arena. Each is set at most once, by the writer as it is built.
        self.runs: RunSender | None = None
        self.arena: ArenaWriter | None = None

    def publish(
        self, seq: int, p: wire.Pickled, deadline: Deadline, watch: Callable[[], None],
        obj: Any,
    ) -> bool:
        """Message ``seq`` into the ring: inline if it fits one chunk, else as a run
        (the run flavor) or as its overflow marker (true: its frame must follow).
        Raises :class:`RingTimeoutError` if the first chunk is not free in time, and
        :class:`SharedMemoryFullError` if its pages cannot be reserved (nothing
        stored: the message is not sent); ``watch`` is called while it waits."""
        size = _chunk_bytes(p)
        inline = self._fits(size)
        runs = self.runs
        if not inline and runs is not None:
            runs.write(p, seq, deadline, watch, obj)
            return False
        cursor = self.cursor
        # the bytes encode_chunk stores: their pages are reserved before the claim
        cursor.claim(deadline, watch, size if inline else _HEADER_BYTES)
        obs = self.observer
        # spec: WriterPublishChunk -- the object inline, or its overflow marker
        chunk = cursor.fill()
        try:  # a raise before publish() lets go of the chunk (KeyboardInterrupt too)
            if obs is not None:
                obs.begin(WRITER_ACTOR)
            _encode_chunk(chunk, seq, p, inline)
            cursor.publish()
        except BaseException:
            if cursor.holding:  # encoding raised, or publish() was interrupted at its start
                cursor.abort()
            raise
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_PUBLISH_CHUNK, seq, obj,
                    "inline" if inline else "overflow")
        return not inline

    def after_handshake(self, reader_names: list[str]) -> None:
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
        self.keys = keys = new_keys()
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
