"""The writer end of a message queue: a local and a remote transmitter, one sequence.

``enqueue`` is: serialize, reserve the remote readers' credit, the local path
(:meth:`LocalTransmitter.publish <.transmitters.LocalTransmitter.publish>`:
inline, an overflow marker or a run), then the frames (the marker's on the
local socket, every message's on the remote one). The state (:class:`WriterState`,
the spec's ``wpc``) says which of those steps a call left unfinished.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import weakref
from collections.abc import Iterator
from typing import Any

from ..errors import BrokenPeerError, MisuseError, RingTimeoutError
from ..hosts import writer_connect_ip
from ..layout import RingLayout
from ..shm import check_room
from ..steps import (
    WRITER_ACTOR,
    WRITER_HANDSHAKE,
    WRITER_PUBLISH_CHUNK,
    WRITER_SEND_FAILS,
    WRITER_SHUTDOWN,
    QueueObserver,
)
from ..waiting import Deadline, StallLog, wait_readable
from . import wire
from .flavors.arena import ArenaOptions, arena_writer
from .flavors.run.writer import RunSender, RunWriter
from .handle import Handle, check_counts, ring_tag
from .lifecycle import WriterState
from .message_queue import MessageQueue
from .peers import Peers
from .serialization import Serializer
from .sockets import Signer, bind_address, new_key
from .transmitters import (
    DEFAULT_LINGER,
    DEFAULT_REMOTE_WINDOW,
    LocalTransmitter,
    RemoteOptions,
    RemoteTransmitter,
)

logger = logging.getLogger("verifiedring")

#: How a message too large for one chunk reaches local readers (see :mod:`.flavors`).
LARGE_OBJECT_MODES = ("stream", "socket")
DEFAULT_LARGE_OBJECTS = "socket"
#: The default for ``large_objects`` where the queue is built for the caller (vLLM,
#: ``create_from_process_group``).
LARGE_OBJECTS_ENV = "VERIFIEDRING_LARGE_OBJECTS"

_CHUNK = WriterState.CHUNK
_RUN = WriterState.RUN

__all__ = ["DEFAULT_LINGER", "DEFAULT_REMOTE_WINDOW", "QueueWriter"]


def _large_objects_mode(large_objects: str | None) -> str:
    if large_objects is None:
        large_objects = os.environ.get(LARGE_OBJECTS_ENV) or DEFAULT_LARGE_OBJECTS
        where = f"{LARGE_OBJECTS_ENV}={large_objects!r}"
    else:
        where = f"large_objects={large_objects!r}"
    if large_objects not in LARGE_OBJECT_MODES:
        raise MisuseError(f"{where}: must be one of {LARGE_OBJECT_MODES}")
    return large_objects


class QueueWriter(MessageQueue):
    """The single writer: ``MessageQueue(n_reader, n_local_reader, ...)`` builds it."""

    is_writer = True

    def __init__(
        self,
        n_reader: int,
        n_local_reader: int,
        local_reader_ranks: list[int] | None = None,
        max_chunk_bytes: int = 10 * 1024 * 1024,
        max_chunks: int = 10,
        connect_ip: str | None = None,
        enable_shm_tensor_arena: bool = False,
        *,
        remote_window: int = DEFAULT_REMOTE_WINDOW,
        linger: float = DEFAULT_LINGER,
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
        remote = RemoteOptions(remote_window, linger)
        layout = RingLayout(max(n_local_reader, 1), max_chunk_bytes, max_chunks)
        if max_chunk_bytes < wire.HEADER_BYTES + 1:
            raise MisuseError(
                f"max_chunk_bytes={max_chunk_bytes} cannot hold a message: a chunk needs the "
                f"{wire.HEADER_BYTES}-byte header plus at least 1 byte"
            )
        if n_local_reader:
            check_room(layout.total_bytes)
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
        self._build(layout, remote if n_remote else None, arena, connect_ip or "")

    def _build(
        self, layout: RingLayout, remote: RemoteOptions | None, arena: ArenaOptions | None,
        ip: str,
    ) -> None:
        """The transmitters, from the checked options; on failure none is left."""
        self._key = new_key()
        self._signer = Signer(self._key)
        self._linger_ms = (remote or RemoteOptions()).linger_ms
        self._serializer = Serializer()
        # Invariant: the sequence number of the next message (every one below was sent).
        self._seq = 0
        self._open()
        self._local: LocalTransmitter | None = None
        self._remote: RemoteTransmitter | None = None
        self._runs: RunSender | None = None
        try:
            if self.n_local_reader:
                self._local = self._local_side(layout, arena if remote is None else None)
            if remote is not None:
                self._remote = RemoteTransmitter(self._ctx, ip, remote, self._who())
        except BaseException:
            self._release()
            raise
        self._dumps = self._serializer.dumps  # bound once: the hot path pays no lookups
        #: The run flavor when it pickles straight into the ring (no remote reader).
        self._streaming = self._runs if self._runs is not None and self._runs.spill else None
        local, far = self._local, self._remote
        self._peers = Peers(
            self._who(), self._signer, self.local_reader_ranks, self.n_reader - self.n_local_reader,
            None if local is None else local.frames.socket, None if far is None else far.socket,
        )
        self._closed = False

    def _local_side(self, layout: RingLayout, arena: ArenaOptions | None) -> LocalTransmitter:
        local = LocalTransmitter(self._ctx, layout, self._observer, self._who())
        try:
            local.cursor.log_interval = self.log_interval
            if self.large_objects == "stream":
                spill = self.n_reader == self.n_local_reader  # no remote reader needs it whole
                owner = weakref.proxy(self)
                local.runs = self._runs = RunSender(
                    local.cursor, self._observer, owner, layout.fits, spill
                )
            if arena is not None:
                local.arena = arena_writer(self.n_local_reader, arena, self)
                self._serializer = Serializer(arena=local.arena)
        except BaseException:
            local.close(0)
            raise
        return local

    @property
    def log_interval(self) -> float:
        """Seconds between two warnings while a wait lasts (the ring's wait too)."""
        return self._log_every

    @log_interval.setter
    def log_interval(self, seconds: float) -> None:
        self._log_every = seconds
        local = getattr(self, "_local", None)  # not made yet while _open runs
        if local is not None:
            local.cursor.log_interval = seconds

    @property
    def rejected_frames(self) -> int:
        """Malformed acknowledgements dropped unread."""
        return 0 if self._remote is None else self._remote.credit.rejected

    def _who(self) -> str:
        return f"writer (pid {os.getpid()})"

    def who(self) -> str:
        """How messages name this writer (for its flavors)."""
        return self._who()

    def export_handle(self) -> Handle:
        if self._closed:
            self._refuse()
        local, remote = self._local, self._remote
        ring = None if local is None else local.ring.handle()
        arena = None if local is None or local.arena is None else local.arena.handle
        return Handle(
            n_reader=self.n_reader,
            local_reader_ranks=self.local_reader_ranks,
            buffer_handle=ring,
            local_subscribe_addr=None if local is None else local.frames.endpoint.address,
            remote_subscribe_addr=None if remote is None else remote.address,
            remote_ack_addr=None if remote is None else remote.ack_address,
            remote_window=self.remote_window,
            hmac_key=self._key,
            ring_tag=b"" if ring is None else ring_tag(self._signer, ring, arena),
            curve=None if remote is None else remote.keys.reader,
            writer_pid=os.getpid(),
            writer_host=socket.gethostname(),
            arena=arena,
        )

    # --- the handshake -------------------------------------------------------

    def _handshake(self, deadline: Deadline) -> None:
        """Wait for every reader to subscribe, then send READY."""
        # spec: WriterHandshake -- every subscription first (essential), then READY
        peers = self._peers
        if not peers.complete():

            def timed_out(waited: float) -> RingTimeoutError:
                return RingTimeoutError(f"{peers.describe()}; timed out after {waited:.3f} s")

            log = StallLog(peers.describe, self.log_interval)
            wait_readable(peers.gather, deadline, log, timed_out)
        obs = self._observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        self._send_control([wire.control_header(wire.READY, 0)], "READY")
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_HANDSHAKE, -1)
        if self._local is not None:
            self._local.after_handshake([peers.name(r) for r in self.local_reader_ranks])
        if self._remote is not None:
            self._remote.credit.start(set(peers.remote))
        self._state = _CHUNK

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
        try:
            if self._state is not _CHUNK:
                deadline = self._settle(timeout)
            else:
                deadline = Deadline.after(timeout)
            seq = self._seq
            streaming = self._streaming
            if streaming is None:
                p = self._dumps(obj)
            else:
                self._state = _RUN
                try:
                    streamed = self._stream(streaming, obj, seq, deadline)
                finally:
                    if self._state is _RUN and not streaming.active:
                        self._state = _CHUNK
                if streamed is None:
                    return
                p = streamed
            self._publish(obj, seq, p, deadline)
        finally:
            self._busy = False

    def _publish(self, obj: Any, seq: int, p: wire.Pickled, deadline: Deadline) -> None:
        """Message ``seq`` (``p``): credit, the local path, then the frames."""
        remote = self._remote
        if remote is not None and remote.credit.needs_check(seq):
            # WriterSendRemoteFrame's guard (credit), checked before anything is published
            remote.credit.reserve(seq, deadline, self._who(), self.log_interval, self._watch)
        local = self._local
        overflow = False
        if local is None:
            obs = self._observer
            if obs is not None:  # no local reader: the spec's publish touches no ring
                obs.begin(WRITER_ACTOR)
                obs.end(WRITER_ACTOR, WRITER_PUBLISH_CHUNK, seq, obj, "inline")
        else:
            try:
                overflow = local.publish(seq, p, deadline, self._watch, obj)
            except RingTimeoutError as exc:
                raise self._ring_stalled(local, seq, exc) from None
            except BaseException:
                if self._runs is not None and self._runs.active:
                    self._state = _RUN  # left mid-run: its ABORT is due
                raise
        if overflow or remote is not None:
            self._send_frames(seq, wire.frame_parts(seq, p), overflow, remote)
        self._seq = seq + 1

    def _stream(
        self, runs: RunSender, obj: Any, seq: int, deadline: Deadline
    ) -> wire.Pickled | None:
        """``obj`` pickled into the ring (no remote reader): a large one as a run
        (``None``: sent), else what fits one chunk."""
        local = self._local
        try:
            p = runs.dump(self._serializer, obj, seq, deadline, self._watch)
        except RingTimeoutError as exc:
            if local is None or runs.active:
                raise
            raise self._ring_stalled(local, seq, exc) from None
        if p is None:
            self._seq = seq + 1
        return p

    def _send_frames(
        self, seq: int, parts: list[Any], overflow: bool, remote: RemoteTransmitter | None
    ) -> None:
        """Message ``seq``'s frames, after its chunk: the marker's on the local socket,
        then the remote one. Interrupted, the writer is broken: ``seq`` is out."""
        local = self._local
        try:
            if overflow and local is not None:
                self._state = WriterState.LOCAL
                self._send(local.frames.send, parts, f"overflow frame seq {seq}", seq)
            if remote is not None:
                self._state = WriterState.REMOTE
                self._send(remote.send, parts, f"remote frame seq {seq}", seq)
        except BaseException as exc:  # also KeyboardInterrupt: seq {seq} is out
            if self._state is not WriterState.BROKEN:
                self._break(
                    f"broken since sending message seq {seq} was interrupted "
                    f"({type(exc).__name__}) after it was published"
                )
            raise
        self._state = _CHUNK

    def _send(self, send: Any, parts: list[Any], what: str, seq: int) -> None:
        """One channel's send of message ``seq`` (-1: a control message, its caller's
        step). A failure breaks the writer for good: what was published before it
        cannot be taken back, and a reader may wait for it."""
        obs = self._observer if seq >= 0 else None
        try:
            send(parts, what, seq, obs)
        except BrokenPeerError as exc:
            # spec: WriterSendFails -- broken for good: no later message, no reused seq
            self._break(f"broken since sending {what} failed: {exc}")
            if obs is not None:
                obs.end(WRITER_ACTOR, WRITER_SEND_FAILS, seq)
            raise

    def _send_control(self, parts: list[Any], what: str) -> None:
        if self._local is not None:
            self._send(self._local.frames.send, parts, what, -1)
        if self._remote is not None:
            self._send(self._remote.send, parts, what, -1)

    @contextlib.contextmanager
    def acquire_write(self, timeout: float | None = None) -> Iterator[memoryview]:
        """vLLM's buffer API: ``with q.acquire_write(t) as buf:`` fills ``buf``
        (``max_chunk_bytes`` minus the header, zeroed), then its bytes are enqueued as
        one message (one copy), with the sequence check and the remote readers of any
        other message. A body that raises sends nothing."""
        if self._state is not _CHUNK and self._state is not _RUN:
            self._refuse()
        scratch = bytearray(self.max_chunk_bytes - wire.HEADER_BYTES)
        with memoryview(scratch) as buf:
            yield buf
        self.enqueue(bytes(scratch), timeout)

    # --- runs -------------------------------------------------------------------------

    def _settle(self, timeout: float | None) -> Deadline:
        """The deadline of a call made while not at CHUNK: a run left mid-way is
        aborted first (a timeout leaves the abort due); any other state refuses."""
        runs = self._runs
        if self._state is not _RUN or runs is None:
            self._refuse()
        deadline = Deadline.after(timeout)
        if runs.active:
            try:
                self.abort_run(runs.run, "the writer was interrupted mid-message", deadline)
            except RingTimeoutError as exc:  # still due: the next call tries again
                if self._local is not None:
                    raise self._ring_stalled(self._local, runs.run.seq, exc) from None
                raise
        self._state = _CHUNK
        return deadline

    def abort_run(self, run: RunWriter, reason: str, deadline: Deadline) -> None:
        """End the unfinished run with ABORT (remote readers get an ABORT frame):
        its sequence number is used up. A timeout leaves the abort due."""
        seq = run.seq
        run.abort(reason, deadline)
        remote = self._remote
        if remote is not None:
            self._state = WriterState.REMOTE_ABORT
            self._send(remote.send, wire.abort_frame(seq, reason), f"abort frame seq {seq}", seq)
        self._seq = seq + 1
        self._state = _CHUNK

    # --- failures ----------------------------------------------------------------------

    def _watch(self) -> None:
        """While the writer waits: a reader that left breaks the writer for good."""
        try:
            self._peers.watch()
        except BrokenPeerError as exc:
            self._break(f"broken since a reader left: {exc}")
            raise

    def _break(self, why: str) -> None:
        self._stop(WriterState.BROKEN, why)

    def _ring_stalled(
        self, local: LocalTransmitter, seq: int, exc: RingTimeoutError
    ) -> RingTimeoutError:
        ranks = [self.local_reader_ranks[i] for i in local.cursor.unread_by()]
        names = ", ".join(self._peers.name(r) for r in ranks)
        return RingTimeoutError(
            f"{self._who()} could not enqueue message seq {seq}: local reader ranks {ranks} "
            f"have not read the chunk it needs ({names}); ring: {exc}"
        )

    # --- the end ------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Tell every reader that no more messages follow (idempotent)."""
        if self._closed:
            self._refuse()
        state = self._state
        if state is not _CHUNK and state is not _RUN:
            return  # before the handshake, shut down or broken: nothing to tell
        runs = self._runs
        if runs is not None and runs.active:
            try:
                self.abort_run(runs.run, "the writer shut down mid-message",
                               Deadline.after(self._linger_ms / 1000))
            except RingTimeoutError as exc:
                logger.warning("%s: shut down without aborting message seq %d mid-run: %s",
                               self._who(), runs.run.seq, exc)
        self._stop(WriterState.SHUT, f"the queue was shut down after {self._seq} messages")
        obs = self._observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterShutdown -- SHUTDOWN(total) on both sockets, after the last message
        self._send_control([wire.control_header(wire.SHUTDOWN, self._seq)], "SHUTDOWN")
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_SHUTDOWN, self._seq)

    def _before_close(self) -> None:
        """SHUTDOWN, then let the remote readers receive everything (at most the linger):
        queued frames die with this process, as the shared context is never terminated."""
        self.shutdown()
        remote = self._remote
        if remote is None or self._state is not WriterState.SHUT:
            return
        deadline = Deadline.after(self._linger_ms / 1000)
        short = remote.credit.settle(self._seq, deadline, self._peers.remote_left)
        if short:
            logger.warning(
                "%s: closed after %.1f s with remote readers %s (rank: acknowledged count) "
                "short of all %d messages; frames still queued for them are lost if this "
                "process exits now", self._who(), self._linger_ms / 1000, short, self._seq,
            )

    def _release(self) -> None:
        if self._remote is not None:
            self._remote.close(self._linger_ms)
        if self._local is not None:
            self._local.close(self._linger_ms)

