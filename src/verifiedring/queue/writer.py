"""The writer end of a message queue: its parts held, one sequence.

``MessageQueue(n_reader, n_local_reader, ...)`` builds it: options checked, then
its parts (:func:`~.writer_parts.build_writer_parts`: the transmitters, the control
channel, the settling of cut calls and the per-message path, on failure none left).
It exports the :class:`~.handle.Handle`, runs the READY handshake
(:meth:`WriterControl.handshake <.writer_control.WriterControl.handshake>`), hands
each message to its path (:class:`~.writer_path.WriterPath`) and ends the writer:
``shutdown()`` only sets ``shutting_down`` (vLLM's); ``close()`` (and the finalizer)
first tells the readers -- a run left unfinished is aborted, then SHUTDOWN(total),
the spec's ``WriterShutdown`` -- and then, with remote readers, waits at most the
linger, and only for messages a remote reader still there has not acknowledged
(:meth:`RemoteCredit.settle <.credit.RemoteCredit.settle>`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any, NoReturn

from ..errors import MisuseError
from ..hosts import writer_connect_ip
from ..layout import RingLayout
from ..reservation import reserve_policy, room_at_create
from ..shm import preflight
from ..steps import QueueObserver
from ..waiting import Deadline
from . import wire
from .curve import DEFAULT_HEARTBEAT_TIMEOUT
from .handle import Handle, check_counts, ring_tag
from .lifecycle import WriterLifecycle
from .message_queue import EndParts, MessageQueue
from .serialization import ArenaOptions
from .sockets import Signer, bind_address, new_key
from .transmitters import DEFAULT_LINGER, DEFAULT_REMOTE_WINDOW, RemoteOptions
from .writer_control import writer_name
from .writer_parts import WriterShape, build_writer_parts, close_transmitters

#: How a message too large for one chunk reaches local readers (see :mod:`.flavors`).
LARGE_OBJECT_MODES = ("stream", "socket")
DEFAULT_LARGE_OBJECTS = "socket"
#: The default for ``large_objects`` where the queue is built for the caller (vLLM,
#: ``create_from_process_group``).
LARGE_OBJECTS_ENV = "VERIFIEDRING_LARGE_OBJECTS"


def _large_objects_mode(large_objects: str | None) -> str:
    if large_objects is None:
        large_objects = os.environ.get(LARGE_OBJECTS_ENV) or DEFAULT_LARGE_OBJECTS
        where = f"{LARGE_OBJECTS_ENV}={large_objects!r}"
    else:
        where = f"large_objects={large_objects!r}"
    if large_objects not in LARGE_OBJECT_MODES:
        raise MisuseError(f"{where}: must be one of {LARGE_OBJECT_MODES}")
    return large_objects


def _checked_shape(  # noqa: PLR0913 -- the constructor's options, checked
    n_reader: int, n_local_reader: int, local_reader_ranks: list[int] | None,
    max_chunk_bytes: int, max_chunks: int, connect_ip: str | None,
    remote: tuple[int, float, float], arena: ArenaOptions | None, large_objects: str | None,
) -> WriterShape:
    """The shape the constructor's options ask for, each checked before any resource
    is held, in this order: the large-object mode, the counts and ranks, the remote
    address (this host's, as vLLM's, when none is given; never a wildcard), the remote
    channel's ``(window, linger, heartbeat_timeout)``, the chunk size, the room for the
    ring."""
    stream = _large_objects_mode(large_objects) == "stream"
    ranks = check_counts(n_reader, n_local_reader, local_reader_ranks)
    if n_reader > n_local_reader:
        if connect_ip is None:
            connect_ip = writer_connect_ip()  # as vLLM: VLLM_HOST_IP, ...
        bind_address(connect_ip)  # refuses wildcard addresses
    options = RemoteOptions(*remote)
    layout = RingLayout(max(n_local_reader, 1), max_chunk_bytes, max_chunks)
    wire.check_chunk_bytes(max_chunk_bytes)
    if n_local_reader:
        preflight(room_at_create(layout, reserve_policy(None)))
    return WriterShape(n_reader, ranks, layout, options, arena, connect_ip or "", stream)


class QueueWriter(MessageQueue):
    """The single writer: ``MessageQueue(n_reader, n_local_reader, ...)`` builds it. It
    holds its transmitters, its control channel and its per-message path."""

    is_writer = True
    rank: int | None = None  # vLLM's attribute: the writer has no reader rank
    _life: WriterLifecycle

    def __init__(  # noqa: PLR0913 -- vLLM's flat constructor, in vLLM's order
        self,
        n_reader: int,
        n_local_reader: int,
        local_reader_ranks: list[int] | None = None,
        max_chunk_bytes: int = wire.DEFAULT_MAX_CHUNK_BYTES,
        max_chunks: int = wire.DEFAULT_MAX_CHUNKS,
        connect_ip: str | None = None,
        enable_shm_tensor_arena: bool = False,
        *,
        remote_window: int = DEFAULT_REMOTE_WINDOW,
        linger: float = DEFAULT_LINGER,
        heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
        observer: QueueObserver | None = None,
        arena_slots: int = ArenaOptions.slots,
        arena_slot_bytes: int = ArenaOptions.slot_bytes,
        large_objects: str | None = None,
    ) -> None:
        """vLLM's parameters, in vLLM's order. ``enable_shm_tensor_arena``: large CPU
        tensors go through a shared tensor arena of ``arena_slots`` slots of
        ``arena_slot_bytes`` bytes (:mod:`verifiedring.arena`), only when every reader
        is local (as vLLM's). ``large_objects``: how a message too large for one chunk
        reaches local readers: ``"stream"``, through the ring as a run of chunks
        (:mod:`.flavors.run`), or ``"socket"``, as a frame on the local socket after an
        overflow marker (default: ``$VERIFIEDRING_LARGE_OBJECTS``, else "socket").
        ``observer`` sees every protocol step (traces)."""
        arena = ArenaOptions(arena_slots, arena_slot_bytes) if enable_shm_tensor_arena else None
        shape = _checked_shape(n_reader, n_local_reader, local_reader_ranks, max_chunk_bytes,
                               max_chunks, connect_ip, (remote_window, linger, heartbeat_timeout),
                               arena, large_objects)
        self.n_reader = n_reader
        self.n_local_reader = n_local_reader
        self.local_reader_ranks = shape.local_ranks
        self.max_chunk_bytes = max_chunk_bytes
        self.max_chunks = max_chunks
        self.remote_window = remote_window
        self.large_objects = "stream" if shape.stream else "socket"
        self._observer = observer
        self._key = new_key()
        self._linger_ms = shape.remote.linger_ms
        #: The writer's state, reason, next sequence number and what its readers are
        #: owed: every change of them goes through it (checked once watched).
        self._life = WriterLifecycle("call wait_until_ready() before enqueue()")
        if observer is not None:
            self._life.watch()
        interval = self._open()
        parts = build_writer_parts(shape, self._ctx, self._key, self._life, observer,
                                   interval)
        self._local, self._remote = parts.local, parts.remote
        #: READY, SHUTDOWN and BROKEN to the readers, and the break for good.
        self._control = parts.control
        #: enqueue and acquire_write, with the settling of what a cut call left.
        self._path = parts.path
        self._closed = False

    @property
    def log_interval(self) -> float:
        """Seconds between two warnings while a wait lasts (the ring's wait too)."""
        return self._path.log_interval

    @log_interval.setter
    def log_interval(self, seconds: float) -> None:
        self._path.log_interval = seconds
        if self._local is not None:
            self._local.cursor.log_interval = seconds

    @property
    def parts(self) -> EndParts:
        local, remote = self._local, self._remote
        if local is None:
            return EndParts(None, None, None, None if remote is None else remote.socket, None,
                            self._path)
        return EndParts(local.ring, local.cursor, local.frames.endpoint.socket,
                        None if remote is None else remote.socket, local.arena, self._path)

    @property
    def rejected_frames(self) -> int:
        """Malformed acknowledgements dropped unread."""
        return 0 if self._remote is None else self._remote.credit.rejected

    def _who(self) -> str:
        return writer_name()

    def _refuse(self) -> NoReturn:
        self._control.refuse()

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        """Broadcast ``obj`` to every reader, waiting at most ``timeout`` seconds for room.

        Nothing is sent when it raises :class:`MisuseError` (unpicklable object) or
        :class:`RingTimeoutError` (no room in time): retrying is safe. A send that
        fails after the message was published leaves the writer broken for good
        (:class:`BrokenPeerError`, now and on every later call). Two threads in one
        writer's enqueue: the second raises :class:`BusyError`.
        """
        self._path.enqueue(obj, timeout)

    def acquire_write(
        self, timeout: float | None = None
    ) -> contextlib.AbstractContextManager[memoryview]:
        """vLLM's buffer API: ``with q.acquire_write(t) as buf:``. Room is waited for
        first (:class:`RingTimeoutError`, a ``TimeoutError``, before the body runs);
        ``buf`` is then the claimed chunk's payload, in place: ``max_chunk_bytes``
        minus the header, holding what the chunk held before (as vLLM's). On exit the
        writer stamps the header (RAW, the sequence number, which readers check) and
        publishes; remote readers get the same bytes as a frame, and a reader's
        ``dequeue`` returns them as ``bytes``. A body that raises publishes nothing and
        uses no sequence number. With remote readers only (no ring) ``buf`` is a zeroed
        scratch buffer. ``buf`` is released on exit: keep no view of it."""
        return self._path.acquire_write(timeout)

    def export_handle(self) -> Handle:
        if self._closed:
            self._refuse()
        local, remote = self._local, self._remote
        ring = None if local is None else local.ring.handle()
        arena = None if local is None or local.arena is None else local.arena.handle
        return Handle(
            n_reader=self.n_reader,
            local_reader_ranks=list(self.local_reader_ranks),
            buffer_handle=ring,
            local_subscribe_addr=None if local is None else local.frames.endpoint.address,
            remote_subscribe_addr=None if remote is None else remote.address,
            remote_ack_addr=None if remote is None else remote.ack_address,
            remote_window=self.remote_window,
            hmac_key=self._key,
            ring_tag=ring_tag(Signer(self._key), ring, arena),
            curve=None if remote is None else remote.keys.reader,
            writer_pid=os.getpid(),
            writer_host=socket.gethostname(),
            tensor_arena_handle=arena,
            remote_addr_ipv6=remote is not None and remote.address.startswith("tcp://["),
        )

    def _handshake(self, deadline: Deadline) -> None:
        """Wait for every reader to subscribe, then send READY."""
        self._control.handshake(deadline, self.log_interval)

    def shutdown(self) -> None:
        """vLLM's: set :attr:`shutting_down`, at any time (idempotent). Nothing is sent
        and nothing refused: an ``enqueue`` in progress on another thread completes and
        a later one is sent. The writer has no cancellable wait to wake (neither has
        vLLM's). Readers learn that no more messages follow from :meth:`close`."""
        self.shutting_down = True

    def _before_close(self) -> None:
        """SHUTDOWN, then let the remote readers receive everything (at most the linger)."""
        cuts = self._path.cuts
        cuts.tell_readers(self._linger_ms / 1000)
        cuts.let_remote_readers_receive(self._linger_ms / 1000)

    def _release(self) -> None:
        # close() cut before its SHUTDOWN (or a BROKEN) went out: sent now, before the
        # sockets close, so the readers learn the end, not only that the writer is gone
        self._control.tell_owed()
        close_transmitters(self._local, self._remote, self._linger_ms)
