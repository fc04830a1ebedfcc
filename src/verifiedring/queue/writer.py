"""The writer end of a message queue: ring chunks, overflow frames, remote frames."""

from __future__ import annotations

import logging
import os
import socket
import weakref
from collections.abc import Callable
from typing import Any

import zmq

from ..arena import DEFAULT_SLOT_BYTES, DEFAULT_SLOTS, ArenaWriter
from ..errors import BrokenPeerError, ClosedError, MisuseError, RingTimeoutError
from ..hosts import writer_connect_ip
from ..layout import RingLayout
from ..ring import ShmRingBuffer, WriterCursor
from ..shm import check_room
from ..steps import (
    WRITER_ACTOR,
    WRITER_HANDSHAKE,
    WRITER_PUBLISH_CHUNK,
    WRITER_SEND_FAILS,
    WRITER_SEND_LOCAL_FRAME,
    WRITER_SEND_REMOTE_FRAME,
    WRITER_SHUTDOWN,
    QueueObserver,
)
from ..waiting import FOREVER, Deadline, StallLog, wait_readable
from . import wire
from .credit import RemoteCredit
from .curve import GATE, ServerKeys, new_keys
from .handle import Handle, check_counts, ring_tag
from .message_queue import MessageQueue
from .peers import Peers
from .run import RunWriter, Spill
from .serialization import Pickled, Serializer
from .sockets import (
    LocalEndpoint,
    Signer,
    ack_pull,
    bind_address,
    hwm_for_window,
    new_key,
    remote_xpub,
    send_frames,
)

logger = logging.getLogger("verifiedring")

_chunk_bytes = wire.chunk_bytes  # bound once: the hot path pays no lookups
_write_inline = wire.write_inline

DEFAULT_REMOTE_WINDOW = 1024
#: How a message too large for one chunk reaches local readers (see :mod:`.run`).
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
#: How long the writer's close() lets queued frames drain to readers.
DEFAULT_LINGER = 5.0


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
        arena_slots: int = DEFAULT_SLOTS,
        arena_slot_bytes: int = DEFAULT_SLOT_BYTES,
        large_objects: str | None = None,
    ) -> None:
        """vLLM's parameters, in vLLM's order. ``enable_shm_tensor_arena``: large CPU
        tensors go through a shared tensor arena of ``arena_slots`` slots of
        ``arena_slot_bytes`` bytes (:mod:`verifiedring.arena`), only when every reader
        is local (as vLLM's). ``large_objects``: how a message too large for one chunk
        reaches local readers: ``"stream"``, through the ring as a run of chunks
        (:mod:`.run`), or ``"socket"``, as a frame on the local socket after an
        overflow marker (default: ``$VERIFIEDRING_LARGE_OBJECTS``, else "socket").
        ``observer`` sees every protocol step (traces)."""
        large_objects = _large_objects_mode(large_objects)
        ranks = check_counts(n_reader, n_local_reader, local_reader_ranks)
        n_remote = n_reader - n_local_reader
        if n_remote and connect_ip is None:
            connect_ip = writer_connect_ip()  # as vLLM: this host's address (VLLM_HOST_IP, ...)
        if n_remote:
            bind_address(connect_ip or "")  # refuses wildcard addresses before any resource
        if isinstance(remote_window, bool) or not isinstance(remote_window, int) or (
            remote_window < 1
        ):
            raise MisuseError(f"remote_window must be an int >= 1, got {remote_window!r}")
        self.layout = RingLayout(max(n_local_reader, 1), max_chunk_bytes, max_chunks)
        if max_chunk_bytes < wire.HEADER_BYTES + 1:
            raise MisuseError(
                f"max_chunk_bytes={max_chunk_bytes} cannot hold a message: a chunk needs the "
                f"{wire.HEADER_BYTES}-byte header plus at least 1 byte"
            )
        self._fits = self.layout.fits
        if n_local_reader:
            check_room(self.layout.total_bytes)
        self.n_reader = n_reader
        self.n_local_reader = n_local_reader
        self.local_reader_ranks = ranks
        self.max_chunk_bytes = max_chunk_bytes
        self.max_chunks = max_chunks
        self.remote_window = remote_window
        self.large_objects = large_objects
        self.rank: int | None = None
        self._n_remote = n_remote
        self._key = new_key()
        self._signer = Signer(self._key)
        self._linger_ms = int(linger * 1000)
        self._serializer = Serializer()
        self._observer = observer
        self._seq = 0  # the next message's sequence number
        self._shutdown_sent = False
        self._ring: ShmRingBuffer | None = None
        self._cursor: WriterCursor | None = None
        self._local: LocalEndpoint | None = None
        self._remote_sock: zmq.Socket[Any] | None = None
        self._remote_addr: str | None = None
        self._ack_addr: str | None = None
        self._credit: RemoteCredit | None = None
        self._curve: ServerKeys | None = None
        self._arena: ArenaWriter | None = None
        self._run: RunWriter | None = None  # stream mode with local readers
        self._spill: Spill | None = None  # ... and no remote reader: pickled into the run
        self._open((MisuseError, "call wait_until_ready() before enqueue()"))
        try:
            if n_local_reader:
                self._ring = ShmRingBuffer(n_local_reader, max_chunk_bytes, max_chunks)
                self._cursor = self._ring.writer(log_interval=self.log_interval)
                self._local = LocalEndpoint(self._ctx, hwm_for_window(max_chunks + 1))
                if large_objects == "stream":
                    self._run = RunWriter(self._cursor)
                    self._run.observer = observer
                    if not n_remote:
                        self._spill = Spill(self._run, max_chunk_bytes)
                if enable_shm_tensor_arena and not n_remote:
                    self._arena = ArenaWriter(
                        n_local_reader, _next_seq_of(self), arena_slots, arena_slot_bytes
                    )
                    self._serializer = Serializer(arena=self._arena)
            if n_remote:
                ip = connect_ip or ""
                self._curve = keys = new_keys()
                GATE.admit(self._ctx, keys)
                self._remote_sock, self._remote_addr = remote_xpub(
                    self._ctx, ip, hwm_for_window(remote_window), keys
                )
                ack_sock, self._ack_addr = ack_pull(self._ctx, ip, keys)
                self._credit = RemoteCredit(ack_sock, remote_window)
        except BaseException:
            self._release()
            raise
        self._peers = Peers(
            self._who(), self._signer, ranks, n_remote,
            None if self._local is None else self._local.socket, self._remote_sock,
        )
        self._closed = False

    @property
    def log_interval(self) -> float:
        """Seconds between two warnings while a wait lasts (the ring's wait too)."""
        return self._log_every

    @log_interval.setter
    def log_interval(self, seconds: float) -> None:
        self._log_every = seconds
        cursor = getattr(self, "_cursor", None)  # not made yet while _open runs
        if cursor is not None:
            cursor.log_interval = seconds

    @property
    def rejected_frames(self) -> int:
        """Malformed acknowledgements dropped unread."""
        return 0 if self._credit is None else self._credit.rejected

    def _who(self) -> str:
        return f"writer (pid {os.getpid()})"

    def export_handle(self) -> Handle:
        if self._closed:
            self._refuse()
        ring = None if self._ring is None else self._ring.handle()
        arena = None if self._arena is None else self._arena.handle
        return Handle(
            n_reader=self.n_reader,
            local_reader_ranks=self.local_reader_ranks,
            buffer_handle=ring,
            local_subscribe_addr=None if self._local is None else self._local.address,
            remote_subscribe_addr=self._remote_addr,
            remote_ack_addr=self._ack_addr,
            remote_window=self.remote_window,
            hmac_key=self._key,
            ring_tag=b"" if ring is None else ring_tag(self._signer, ring, arena),
            curve=None if self._curve is None else self._curve.reader,
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
        ready = [wire.control_header(wire.READY, 0)]
        obs = self._observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        self._send_all(ready, ready, "READY", "READY")
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_HANDSHAKE, -1)
        # Every reader has attached: no name is needed any more, so no crash leaves one.
        if self._ring is not None:
            self._ring.unlink()
        if self._arena is not None:
            self._arena.unlink()
        if self._local is not None:
            self._local.remove_directory()
        if self._credit is not None:
            self._credit.start(set(peers.remote))
        if self._cursor is not None:
            self._cursor.reader_names = [peers.name(r) for r in self.local_reader_ranks]

    # --- messages ------------------------------------------------------------------

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        """Broadcast ``obj`` to every reader, waiting at most ``timeout`` seconds for room.

        Nothing is sent when it raises :class:`MisuseError` (unpicklable object) or
        :class:`RingTimeoutError` (no room in time): retrying is safe. A send that
        fails after the message was published leaves the writer broken for good
        (:class:`BrokenPeerError`, now and on every later call).
        """
        if self._refusal is not None:
            self._refuse()
        deadline = FOREVER if timeout is None else Deadline.after(timeout)
        run = self._run
        if run is not None and run.active:
            try:
                self._abort_run(run, "the writer was interrupted mid-message", deadline)
            except RingTimeoutError as exc:  # still due: the next call tries again
                raise self._ring_stalled(run.cursor, run.seq, exc) from None
        seq = self._seq
        if self._spill is None:
            p = self._serializer.dumps(obj)
        else:
            streamed = self._dump_into_ring(obj, seq, deadline, self._spill)
            if streamed is None:
                self._seq = seq + 1
                return
            p = streamed
        credit = self._credit
        if credit is not None and credit.needs_check(seq):
            # WriterSendRemoteFrame's guard (credit), checked before anything is published
            credit.reserve(seq, deadline, self._who(), self.log_interval, self._watch)
        cursor = self._cursor
        overflow = False
        obs = self._observer
        fits = cursor is None or self._fits(_chunk_bytes(p))
        if not fits and run is not None:
            self._write_run(run, p, seq, deadline, obj)  # then the remote frame, below
        elif cursor is not None:
            overflow = not fits
            try:
                # spec: WriterPublishChunk -- the object inline, or its overflow marker
                with cursor.claim(deadline, self._watch) as chunk:
                    if obs is not None:
                        obs.begin(WRITER_ACTOR)
                    if overflow:
                        wire.write_marker(chunk, seq, p)
                    else:
                        _write_inline(chunk, seq, p)
            except RingTimeoutError as exc:
                raise self._ring_stalled(cursor, seq, exc) from None
        elif obs is not None:
            obs.begin(WRITER_ACTOR)  # no local reader: the spec's publish touches no ring
        if obs is not None and (fits or run is None):
            obs.end(WRITER_ACTOR, WRITER_PUBLISH_CHUNK, seq, obj,
                    "overflow" if overflow else "inline")
        if overflow or credit is not None:
            parts = wire.frame_parts(seq, p)
            try:
                self._send_all(
                    parts if overflow else None, parts,
                    f"overflow frame seq {seq}", f"remote frame seq {seq}", seq,
                )
            except BaseException as exc:  # also KeyboardInterrupt: seq {seq} is out
                if self._refusal is None:
                    self._refusal = (
                        BrokenPeerError,
                        f"broken since sending message seq {seq} was interrupted "
                        f"({type(exc).__name__}) after it was published",
                    )
                raise
        self._seq = seq + 1

    def _dump_into_ring(
        self, obj: Any, seq: int, deadline: Deadline, spill: Spill
    ) -> Pickled | None:
        """``obj`` pickled: what fits one chunk is returned; a larger object is
        pickled straight into a run of chunks (``None``: sent)."""
        run = spill.run
        spill.arm(seq, deadline, self._watch, obj)
        try:
            p = self._serializer.dump_into(obj, spill)
        except MisuseError as exc:
            if not run.active:
                raise
            self._abort_run(run, f"pickling raised {exc.__cause__!r}", deadline)
            raise MisuseError(
                f"{self._who()}: cannot serialize message seq {seq} (an object of type "
                f"{type(obj).__module__}.{type(obj).__qualname__}): {exc.__cause__!r} after "
                f"{run.part - 1} of its chunks were published; the message was aborted (every "
                "reader raises MessageAbortedError for it)"
            ) from exc.__cause__
        except RingTimeoutError as exc:
            if run.active:
                raise
            raise self._ring_stalled(run.cursor, seq, exc) from None
        except BaseException as exc:  # KeyboardInterrupt and the like
            self._abort_if_holding(run, exc)
            raise
        finally:
            spill.disarm()
        if p is None:
            run.finish()
        return p

    def _abort_if_holding(self, run: RunWriter, exc: BaseException) -> None:
        """An asynchronous exception mid-run: if the run holds a chunk, ABORT goes in it
        now (no wait); else the abort is due at the next call."""
        if run.active and run.holding:
            self._abort_run(run, f"the writer was interrupted ({type(exc).__name__})", FOREVER)

    def _write_run(
        self, run: RunWriter, p: Pickled, seq: int, deadline: Deadline, obj: Any
    ) -> None:
        """``p`` (pickled already: remote readers need it whole) as a run of chunks."""
        try:
            run.begin(seq, deadline, self._watch, obj)
        except RingTimeoutError as exc:
            raise self._ring_stalled(run.cursor, seq, exc) from None
        try:
            run.write_head(p[1])
            run.write(p[0])
        except BaseException as exc:
            self._abort_if_holding(run, exc)
            raise
        run.finish()

    def _abort_run(self, run: RunWriter, reason: str, deadline: Deadline) -> None:
        """End the unfinished run with ABORT (remote readers get an ABORT frame):
        its sequence number is used up. A timeout leaves the abort due."""
        seq = run.seq
        run.abort(reason, deadline)
        if self._remote_sock is not None:
            frame = [wire.HEADER.pack(wire.RUN_ABORT, seq, 0, 0), reason.encode("utf-8", "replace")]
            self._send_all(None, frame, "", f"abort frame seq {seq}", seq)
        self._seq = seq + 1

    def _send_all(
        self, local: list[Any] | None, remote: list[Any] | None, local_what: str,
        remote_what: str, seq: int = -1,
    ) -> None:
        """Send ``local`` on the local socket and ``remote`` on the remote one (each if
        not None and the socket exists): message ``seq``'s frames, or a control message
        (``seq`` -1). A failure breaks the writer for good: what was published before
        it cannot be taken back, and a reader may wait for it."""
        what = local_what
        obs = self._observer if seq >= 0 else None  # a control send is its caller's step
        try:
            if local is not None and self._local is not None:
                if obs is not None:
                    obs.begin(WRITER_ACTOR)
                # spec: WriterSendLocalFrame -- the payload, after its marker is published
                send_frames(self._local.socket, local, local_what, self._who())
                if obs is not None:
                    obs.end(WRITER_ACTOR, WRITER_SEND_LOCAL_FRAME, seq)
            what = remote_what
            if remote is not None and self._remote_sock is not None:
                if obs is not None:
                    obs.begin(WRITER_ACTOR)
                # spec: WriterSendRemoteFrame (credit reserved before the chunk)
                send_frames(self._remote_sock, remote, remote_what, self._who())
                if obs is not None:
                    obs.end(WRITER_ACTOR, WRITER_SEND_REMOTE_FRAME, seq)
        except BrokenPeerError as exc:
            # spec: WriterSendFails -- broken for good: no later message, no reused seq
            self._refusal = (BrokenPeerError, f"broken since sending {what} failed: {exc}")
            if obs is not None:
                obs.end(WRITER_ACTOR, WRITER_SEND_FAILS, seq)
            raise

    def _watch(self) -> None:
        """While the writer waits: a reader that left breaks the writer for good."""
        try:
            self._peers.watch()
        except BrokenPeerError as exc:
            self._refusal = (BrokenPeerError, f"broken since a reader left: {exc}")
            raise

    def _ring_stalled(
        self, cursor: WriterCursor, seq: int, exc: RingTimeoutError
    ) -> RingTimeoutError:
        ranks = [self.local_reader_ranks[i] for i in cursor.unread_by()]
        names = ", ".join(self._peers.name(r) for r in ranks)
        return RingTimeoutError(
            f"{self._who()} could not enqueue message seq {seq}: local reader ranks {ranks} "
            f"have not read the chunk it needs ({names}); ring: {exc}"
        )

    def shutdown(self) -> None:
        """Tell every reader that no more messages follow (idempotent)."""
        if self._closed:
            self._refuse()
        if self._shutdown_sent or self._refusal is not None:
            return  # before the handshake, or broken: nothing a reader could receive
        run = self._run
        if run is not None and run.active:
            try:
                self._abort_run(run, "the writer shut down mid-message", Deadline.after(
                    self._linger_ms / 1000))
            except RingTimeoutError as exc:
                logger.warning("%s: shut down without aborting message seq %d mid-run: %s",
                               self._who(), run.seq, exc)
        self._shutdown_sent = True
        self._refusal = (ClosedError, f"the queue was shut down after {self._seq} messages")
        header = [wire.control_header(wire.SHUTDOWN, self._seq)]
        obs = self._observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterShutdown -- SHUTDOWN(total) on both sockets, after the last message
        self._send_all(header, header, "SHUTDOWN", "SHUTDOWN")
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_SHUTDOWN, self._seq)

    def _before_close(self) -> None:
        """SHUTDOWN, then let the remote readers receive everything (at most the linger):
        queued frames die with this process, as the shared context is never terminated."""
        self.shutdown()
        if self._credit is None or not self._shutdown_sent:
            return
        deadline = Deadline.after(self._linger_ms / 1000)
        short = self._credit.settle(self._seq, deadline, self._peers.remote_left)
        if short:
            logger.warning(
                "%s: closed after %.1f s with remote readers %s (rank: acknowledged count) "
                "short of all %d messages; frames still queued for them are lost if this "
                "process exits now", self._who(), self._linger_ms / 1000, short, self._seq,
            )

    def _release(self) -> None:
        linger = self._linger_ms
        if self._remote_sock is not None:
            self._remote_sock.close(linger=linger)
        if self._credit is not None:
            self._credit.close()
        if self._curve is not None:
            GATE.revoke(self._curve)
        if self._local is not None:
            self._local.close(linger)
        if self._ring is not None:
            self._ring.close()
        if self._arena is not None:
            self._arena.close()


def _next_seq_of(writer: QueueWriter) -> Callable[[], int]:
    """The arena's view of ``writer``'s next sequence number, through a weak reference:
    no cycle, so ``mq = None`` frees the writer at once."""
    ref = weakref.ref(writer)

    def next_seq() -> int:
        w = ref()
        return -1 if w is None else w._seq

    return next_seq
