"""What the writer is made of, built from checked options (on failure none is left).

:func:`build_writer_parts` makes the :class:`~.transmitters.LocalTransmitter` and
:class:`~.transmitters.RemoteTransmitter`, the large-object flavor, the control
channel (:class:`~.writer_control.WriterControl`: READY, SHUTDOWN, BROKEN, and the
break for good), the settling of cut calls (:class:`~.writer_cuts.CutCalls`) and
the per-message path (:class:`~.writer_path.WriterPath`) over them. The writer end
(:class:`~.writer.QueueWriter`) holds them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import zmq

from ..layout import RingLayout
from ..steps import QueueObserver
from .flavors.run.writer import RunSender
from .lifecycle import WriterLifecycle
from .peers import Peers
from .serialization import ArenaOptions, Serializer, arena_writer
from .sockets import Signer
from .transmitters import LocalTransmitter, RemoteOptions, RemoteTransmitter
from .writer_control import WriterControl, writer_name
from .writer_cuts import CutCalls
from .writer_path import WriterPath


class WriterShape(NamedTuple):
    """The writer's checked options: its readers, ring, remote channel and arena."""

    n_reader: int
    local_ranks: tuple[int, ...]
    layout: RingLayout
    remote: RemoteOptions
    arena: ArenaOptions | None  # used only when every reader is local
    ip: str  # the remote channel's address (with remote readers)
    stream: bool  # large objects as runs of chunks, else the socket flavor


class WriterParts(NamedTuple):
    """The writer's parts, each shared by the ones over it; none refers to the end."""

    local: LocalTransmitter | None  # None: no local reader
    remote: RemoteTransmitter | None  # None: no remote reader
    control: WriterControl
    path: WriterPath


def build_writer_parts(
    shape: WriterShape, ctx: zmq.Context[Any], key: bytes, life: WriterLifecycle,
    observer: QueueObserver | None, log_interval: float,
) -> WriterParts:
    """The transmitters, then the parts over them; on failure none is left."""
    n_local = len(shape.local_ranks)
    n_remote = shape.n_reader - n_local
    local: LocalTransmitter | None = None
    remote: RemoteTransmitter | None = None
    try:
        runs: RunSender | None = None
        serializer = Serializer()
        if n_local:
            local = LocalTransmitter(ctx, shape.layout, observer, writer_name())
            local.cursor.log_interval = log_interval
            if shape.stream:
                spill = n_remote == 0  # no remote reader needs it whole
                runs = RunSender(local.cursor, observer, writer_name, shape.layout.fits, spill)
            if shape.arena is not None and not n_remote:
                local.arena = arena_writer(n_local, shape.arena, life)
                serializer = Serializer(arena=local.arena)
        if n_remote:
            remote = RemoteTransmitter(ctx, shape.ip, shape.remote, writer_name())
        peers = Peers(
            writer_name(), Signer(key), shape.local_ranks, n_remote,
            (None if local is None else local.frames.endpoint.socket,
             None if remote is None else remote.socket),
        )
        control = WriterControl(life, local, remote, peers, shape.local_ranks, observer)
        cuts = CutCalls(life, local, remote, runs, control)
        path = WriterPath(life, local, remote, runs, serializer, control, cuts, observer,
                          shape.layout.max_chunk_bytes, log_interval)
    except BaseException:
        close_transmitters(local, remote, shape.remote.linger_ms)
        raise
    return WriterParts(local, remote, control, path)


def close_transmitters(
    local: LocalTransmitter | None, remote: RemoteTransmitter | None, linger_ms: int
) -> None:
    """Close the sockets (queued frames: at most the linger) and the segment."""
    if remote is not None:
        remote.close(linger_ms)
    if local is not None:
        local.close(linger_ms)
