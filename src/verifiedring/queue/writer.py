"""The writer end of a message queue: a local and a remote transmitter, one sequence.

``enqueue`` is: serialize, reserve the remote readers' credit, the local path
(:meth:`LocalTransmitter.publish <.transmitters.LocalTransmitter.publish>`:
inline, or by the large-object flavor, a :class:`~.flavors.LargeSender`: an
overflow marker or a run), then the frames (the marker's on the local socket,
every message's on the remote one). The state (:class:`WriterState`,
the spec's ``wpc``) says which of those steps a call left unfinished.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Iterator
from typing import Any

from ..errors import MisuseError, RingTimeoutError
from ..hosts import writer_connect_ip
from ..layout import RingLayout
from ..reservation import reserve_policy, room_at_create
from ..shm import preflight
from ..steps import (
    WRITER_ACTOR,
    WRITER_PUBLISH_CHUNK,
    QueueObserver,
)
from ..waiting import FOREVER, Deadline
from . import wire
from .curve import DEFAULT_HEARTBEAT_TIMEOUT
from .flavors.run.writer import RunSender, unbound_abort
from .handle import check_counts
from .lifecycle import WriterState
from .serialization import ArenaOptions
from .sockets import bind_address
from .transmitters import (
    DEFAULT_LINGER,
    DEFAULT_REMOTE_WINDOW,
    LocalTransmitter,
    RemoteOptions,
    RemoteTransmitter,
)
from .writer_base import WriterBase

#: How a message too large for one chunk reaches local readers (see :mod:`.flavors`).
LARGE_OBJECT_MODES = ("stream", "socket")
DEFAULT_LARGE_OBJECTS = "socket"
#: The default for ``large_objects`` where the queue is built for the caller (vLLM,
#: ``create_from_process_group``).
LARGE_OBJECTS_ENV = "VERIFIEDRING_LARGE_OBJECTS"

_CHUNK = WriterState.CHUNK
_RUN = WriterState.RUN
_after = Deadline.after  # bound once: no bound method made per call


def _large_objects_mode(large_objects: str | None) -> str:
    if large_objects is None:
        large_objects = os.environ.get(LARGE_OBJECTS_ENV) or DEFAULT_LARGE_OBJECTS
        where = f"{LARGE_OBJECTS_ENV}={large_objects!r}"
    else:
        where = f"large_objects={large_objects!r}"
    if large_objects not in LARGE_OBJECT_MODES:
        raise MisuseError(f"{where}: must be one of {LARGE_OBJECT_MODES}")
    return large_objects


class QueueWriter(WriterBase):
    """The single writer: ``MessageQueue(n_reader, n_local_reader, ...)`` builds it."""

    is_writer = True

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
        large_objects = _large_objects_mode(large_objects)
        ranks = check_counts(n_reader, n_local_reader, local_reader_ranks)
        n_remote = n_reader - n_local_reader
        if n_remote and connect_ip is None:
            connect_ip = writer_connect_ip()  # as vLLM: this host's address (VLLM_HOST_IP, ...)
        if n_remote:
            bind_address(connect_ip or "")  # refuses wildcard addresses before any resource
        remote = RemoteOptions(remote_window, linger, heartbeat_timeout)
        layout = RingLayout(max(n_local_reader, 1), max_chunk_bytes, max_chunks)
        wire.check_chunk_bytes(max_chunk_bytes)
        if n_local_reader:
            preflight(room_at_create(layout, reserve_policy(None)))
        self.n_reader = n_reader
        self.n_local_reader = n_local_reader
        self.local_reader_ranks = ranks
        self.max_chunk_bytes = max_chunk_bytes
        self.max_chunks = max_chunks
        self.remote_window = remote_window
        self.large_objects = large_objects
        self.rank: int | None = None
        self._observer = observer
        arena = ArenaOptions(arena_slots, arena_slot_bytes) if enable_shm_tensor_arena else None
        self._build(layout, remote, arena, connect_ip or "")

    # --- messages ------------------------------------------------------------------

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        """Broadcast ``obj`` to every reader, waiting at most ``timeout`` seconds for room.

        Nothing is sent when it raises :class:`MisuseError` (unpicklable object) or
        :class:`RingTimeoutError` (no room in time): retrying is safe. A send that
        fails after the message was published leaves the writer broken for good
        (:class:`BrokenPeerError`, now and on every later call). Two threads in one
        writer's enqueue: the second raises :class:`BusyError`.
        """
        if self._busy:
            raise self._conflict("enqueue()")
        self._busy = True
        runs = self._runs
        if runs is not None:  # a run this call cannot finish is aborted by the writer
            runs.abort = self._cuts.abort_run  # this call's (cleared as it ends: no cycle)
        try:
            # at CHUNK, the hot path (untimed: no call); else a due abort first, or a refusal
            life = self._life
            local = self._local
            if local is not None and local.committing[0] == life.seq:
                self._cuts.settle_commit(local)  # the last call's publish, cut and unsettled
            if life.state is not _CHUNK:
                deadline = self._cuts.settle(timeout)
            elif timeout is None:
                deadline = FOREVER
            else:
                deadline = _after(timeout)
            seq = life.seq
            if runs is None or not runs.spill:
                p = self._dumps(obj)
            else:  # the run flavor pickles straight into the ring (no remote reader)
                streamed = self._stream(runs, obj, seq, deadline)
                if streamed is None:
                    return
                p = streamed
            self._publish(obj, seq, p, deadline)
        finally:
            self._busy = False
            if runs is not None:
                runs.abort = unbound_abort

    def _publish(self, obj: Any, seq: int, p: wire.Pickled, deadline: Deadline) -> None:
        """Message ``seq`` (``p``): credit, the local path, then the frames."""
        remote = self._remote
        if remote is not None and remote.credit.needs_check(seq):
            # WriterSendRemoteFrame's guard (credit), checked before anything is published
            remote.credit.reserve(seq, deadline, self._who(), self.log_interval, self._watch)
        local, large = self._local, self._large
        overflow = False
        if local is None or large is None:
            obs = self._observer
            if obs is not None:  # no local reader: the spec's publish touches no ring
                obs.begin(WRITER_ACTOR)
                obs.end(WRITER_ACTOR, WRITER_PUBLISH_CHUNK, seq, obj, "inline")
        else:
            try:
                overflow = local.publish(seq, p, deadline, self._watch, obj, large)
            except RingTimeoutError as exc:
                raise self._control.ring_stalled(local, seq, exc) from None
            except BaseException as exc:
                self._cuts.local_path_raised(exc, seq, local, remote)
                raise
        if overflow or remote is not None:
            try:  # from the call on: its frame_parts, its first line (an interrupt there)
                self._send_frames(seq, wire.frame_parts(seq, p), overflow, remote)
            except BaseException as exc:  # also KeyboardInterrupt: seq {seq} is out
                self._control.break_interrupted(
                    exc, f"sending message seq {seq}", "it was published")
                raise
        self._life.seq = seq + 1  # plain: no call between the publish and it

    def _stream(
        self, runs: RunSender, obj: Any, seq: int, deadline: Deadline
    ) -> wire.Pickled | None:
        """``obj`` pickled into the ring (no remote reader), in state RUN: a large one
        as a run (``None``: sent), else what fits one chunk; back to CHUNK unless a run
        is left unfinished."""
        life = self._life
        life.enter(_RUN)
        try:
            try:
                p = runs.dump(self._serializer, obj, seq, deadline, self._watch)
            except RingTimeoutError as exc:
                local = self._local
                if local is None or runs.active:
                    raise
                raise self._control.ring_stalled(local, seq, exc) from None
            except BaseException as exc:
                if runs.run.ended == seq:  # interrupted after its LAST's store: it is sent
                    self._cuts.published_then_interrupted(exc, seq, True, None)
                raise
            if p is None:
                life.seq = seq + 1  # plain: no call between the run's LAST and it
            return p
        finally:
            if life.state is _RUN and not runs.active:
                life.enter(_CHUNK)

    def _send_frames(
        self, seq: int, parts: list[Any], overflow: bool, remote: RemoteTransmitter | None
    ) -> None:
        """Message ``seq``'s frames, after its chunk: the marker's on the local socket,
        then the remote one. Interrupted, the writer is broken (the caller's)."""
        local, life = self._local, self._life
        if overflow and local is not None:
            life.enter(WriterState.LOCAL)
            self._control.send(local.frames.send, parts, f"overflow frame seq {seq}", seq)
        if remote is not None:
            life.enter(WriterState.REMOTE)
            self._control.send(remote.send, parts, f"remote frame seq {seq}", seq)
        life.enter(_CHUNK)

    @contextlib.contextmanager
    def acquire_write(self, timeout: float | None = None) -> Iterator[memoryview]:
        """vLLM's buffer API: ``with q.acquire_write(t) as buf:``. Room is waited for
        first (:class:`RingTimeoutError`, a ``TimeoutError``, before the body runs);
        ``buf`` is then the claimed chunk's payload, in place: ``max_chunk_bytes``
        minus the header, holding what the chunk held before (as vLLM's). On exit the
        writer stamps the header (RAW, the sequence number, which readers check) and
        publishes; remote readers get the same bytes as a frame, and a reader's
        ``dequeue`` returns them as ``bytes``. A body that raises publishes nothing and
        uses no sequence number. With remote readers only (no ring) ``buf`` is a zeroed
        scratch buffer. ``buf`` is released on exit: keep no view of it."""
        if self._busy:
            raise self._conflict("acquire_write()")
        self._busy = True
        try:
            life = self._life
            local = self._local
            if local is not None and local.committing[0] == life.seq:
                self._cuts.settle_commit(local)  # the last call's publish, cut and unsettled
            deadline = _after(timeout) if life.state is _CHUNK else self._cuts.settle(timeout)
            seq = life.seq
            remote = self._remote
            if remote is not None and remote.credit.needs_check(seq):
                remote.credit.reserve(seq, deadline, self._who(), self.log_interval, self._watch)
            if local is None:
                scratch = bytearray(self.max_chunk_bytes - wire.HEADER_BYTES)
                with memoryview(scratch) as buf:
                    yield buf
                data = bytes(scratch)
                obs = self._observer
                if obs is not None:  # no local reader: the spec's publish touches no ring
                    obs.begin(WRITER_ACTOR)
                    obs.end(WRITER_ACTOR, WRITER_PUBLISH_CHUNK, seq, data, "inline")
            else:
                data = yield from self._in_place(local, seq, deadline, remote is not None)
            if remote is not None:
                try:
                    self._send_frames(seq, wire.frame_parts(seq, self._dumps(data)), False, remote)
                except BaseException as exc:  # also KeyboardInterrupt: seq {seq} is out
                    self._control.break_interrupted(
                        exc, f"sending message seq {seq}", "it was published")
                    raise
            life.seq = seq + 1  # plain: no call between the publish and it
        finally:
            self._busy = False

    def _in_place(
        self, local: LocalTransmitter, seq: int, deadline: Deadline, copy: bool
    ) -> Generator[memoryview, None, bytes]:
        """acquire_write's ring chunk: claimed, its payload yielded, published (or, the
        body raising, let go); its bytes when ``copy`` (for the remote frame)."""
        try:
            chunk = local.claim(deadline, self._watch)
        except RingTimeoutError as exc:
            raise self._control.ring_stalled(local, seq, exc) from None
        try:
            with chunk[wire.HEADER_BYTES :] as buf:
                yield buf
            obs = self._observer
            data = bytes(chunk[wire.HEADER_BYTES :]) if copy or obs is not None else b""
        except BaseException:
            local.let_go()  # the spec's WriterAbort: nothing published, seq unused
            raise
        try:
            local.commit(chunk, seq, None, True, data)
        except BaseException as exc:
            if local.published[0] == seq:
                self._cuts.published_then_interrupted(exc, seq, True, self._remote)
            raise
        return data
