"""What the writer is: its two transmitters, its readers, its handle and handshake.

:class:`WriterBase` builds the writer's :class:`~.transmitters.LocalTransmitter`
and :class:`~.transmitters.RemoteTransmitter` from checked options (on failure
none is left), knows its readers (:class:`~.peers.Peers`), exports the
:class:`~.handle.Handle`, runs the READY handshake, and owns the one send path
and the way a failure breaks the writer for good. What the writer does per
message is :class:`~.writer.QueueWriter`'s.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from typing import Any, NoReturn

import zmq

from ..errors import BrokenPeerError, RingTimeoutError
from ..layout import RingLayout
from ..steps import (
    WRITER_ACTOR,
    WRITER_HANDSHAKE,
    WRITER_READER_LEFT,
    WRITER_SEND_FAILS,
    WRITER_TELL_BROKEN,
    QueueObserver,
)
from ..waiting import Deadline, StallLog, wait_readable
from . import wire
from .flavors import LargeSender
from .flavors.overflow import MarkerSender
from .flavors.run.writer import RunSender
from .handle import Handle, ring_tag
from .lifecycle import WriterLifecycle, WriterState, refusal
from .message_queue import MessageQueue
from .peers import Peers
from .serialization import ArenaOptions, Serializer, arena_writer
from .sockets import Signer, new_key, send_now, welcome
from .transmitters import LocalTransmitter, RemoteOptions, RemoteTransmitter

logger = logging.getLogger("verifiedring")

#: A channel's send: ``(parts, what, seq, observer)``.
Send = Callable[[list[Any], str, int, "QueueObserver | None"], None]


def writer_name() -> str:
    """How messages name the writer: its process."""
    return f"writer (pid {os.getpid()})"


class WriterBase(MessageQueue):
    """The writer's parts and its ends' shared steps (handshake, send, failure)."""

    is_writer = True
    n_reader: int
    n_local_reader: int
    local_reader_ranks: tuple[int, ...]
    remote_window: int
    large_objects: str

    def _build(
        self, layout: RingLayout, remote: RemoteOptions, arena: ArenaOptions | None, ip: str
    ) -> None:
        """The transmitters, from the checked options (``remote`` is used only with
        remote readers, its linger always); on failure none is left."""
        self._key = new_key()
        self._signer = Signer(self._key)
        self._linger_ms = remote.linger_ms
        self._serializer = Serializer()
        #: The writer's state, reason, next sequence number and what its readers are
        #: owed: every change of them goes through it (checked once watched).
        self._life = WriterLifecycle("call wait_until_ready() before enqueue()")
        if self._observer is not None:
            self._life.watch()
        self._open()
        n_remote = self.n_reader - self.n_local_reader
        self._local: LocalTransmitter | None = None
        self._remote: RemoteTransmitter | None = None
        self._runs: RunSender | None = None
        try:
            if self.n_local_reader:
                self._local = self._local_side(layout, None if n_remote else arena)
            if n_remote:
                self._remote = RemoteTransmitter(self._ctx, ip, remote, self._who())
        except BaseException:
            self._release()
            raise
        self._dumps = self._serializer.dumps  # bound once: the hot path pays no lookups
        #: How a message too large for one chunk reaches the local readers (None: no
        #: local reader): the run flavor, else the socket flavor's marker.
        self._large: LargeSender | None = None
        if self._local is not None:
            self._large = self._runs or MarkerSender(self._local.publish_chunk)
        local, far = self._local, self._remote
        self._peers = Peers(
            self._who(), self._signer, self.local_reader_ranks, n_remote,
            (None if local is None else local.frames.endpoint.socket,
             None if far is None else far.socket),
        )
        self._closed = False

    def _local_side(self, layout: RingLayout, arena: ArenaOptions | None) -> LocalTransmitter:
        local = LocalTransmitter(self._ctx, layout, self._observer, self._who())
        try:
            local.cursor.log_interval = self.log_interval
            if self.large_objects == "stream":
                spill = self.n_reader == self.n_local_reader  # no remote reader needs it whole
                self._runs = RunSender(
                    local.cursor, self._observer, writer_name, layout.fits, spill
                )
            if arena is not None:
                local.arena = arena_writer(self.n_local_reader, arena, self._life)
                self._serializer = Serializer(arena=local.arena)
        except BaseException:
            local.close(0)
            raise
        return local

    @property
    def log_interval(self) -> float:
        """Seconds between two warnings while a wait lasts (the ring's wait too)."""
        return self._log_interval_s

    @log_interval.setter
    def log_interval(self, seconds: float) -> None:
        self._log_interval_s = seconds
        local = getattr(self, "_local", None)  # not made yet while _open runs
        if local is not None:
            local.cursor.log_interval = seconds

    @property
    def rejected_frames(self) -> int:
        """Malformed acknowledgements dropped unread."""
        return 0 if self._remote is None else self._remote.credit.rejected

    def _who(self) -> str:
        return writer_name()

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
            ring_tag=ring_tag(self._signer, ring, arena),
            curve=None if remote is None else remote.keys.reader,
            writer_pid=os.getpid(),
            writer_host=socket.gethostname(),
            tensor_arena_handle=arena,
            remote_addr_ipv6=remote is not None and remote.address.startswith("tcp://["),
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
        for xpub in self._peers.sockets():
            welcome(xpub, wire.late_frame())  # a later subscriber is told it is late
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_HANDSHAKE, -1)
        if self._local is not None:
            self._local.after_handshake([peers.stall_name(r) for r in self.local_reader_ranks])
        if self._remote is not None:
            self._remote.credit.start(set(peers.remote))
            self._remote.close_door()  # a later reader is refused at connect, writer idle or not
        self._life.ready()

    def _send(self, send: Send, parts: list[Any], what: str, seq: int) -> None:
        """One channel's send of message ``seq`` (-1: a control message, its caller's
        step). A failure breaks the writer for good: what was published before it
        cannot be taken back, and a reader may wait for it."""
        obs = self._observer if seq >= 0 else None
        try:
            send(parts, what, seq, obs)
        except BrokenPeerError as exc:
            # spec: WriterSendFails -- broken for good: no later message, no reused seq
            if obs is not None:  # the send's step ends before the break tells anyone
                obs.end(WRITER_ACTOR, WRITER_SEND_FAILS, seq)
            self._break(f"broken since sending {what} failed: {exc}")
            raise

    def _send_control(self, parts: list[Any], what: str) -> None:
        if self._local is not None:
            self._send(self._local.frames.send, parts, what, -1)
        if self._remote is not None:
            self._send(self._remote.send, parts, what, -1)

    # --- failures ----------------------------------------------------------------------

    def _watch(self) -> None:
        """While the writer waits: a reader that left breaks the writer for good."""
        try:
            self._peers.watch()
        except BrokenPeerError as exc:
            obs = self._observer
            if obs is not None:
                obs.begin(WRITER_ACTOR)
                # spec: WriterReaderLeft -- a reader's connection closed: broken for good
                obs.end(WRITER_ACTOR, WRITER_READER_LEFT, self._life.seq)
            self._break(f"broken since a reader left: {exc}")
            raise

    def _break(self, why: str) -> None:
        """Broken for good; readers past READY are told (:meth:`_tell_broken`)."""
        if self._life.broke(why, wire.broken_frame(self._life.seq, why)):
            self._tell_broken()

    def _refuse(self) -> NoReturn:
        """Raise why this end cannot operate now; first let ZeroMQ run the sockets'
        pending commands, so a reader that subscribed since gets its welcome (LATE) even
        from a writer that only refuses (broken, shut down)."""
        for sock in self._peers.sockets():
            if not sock.closed:
                sock.getsockopt(zmq.EVENTS)
        life = self._life
        # spec: WriterInterruptedInTell -- a BROKEN whose telling was cut is still owed
        if life.broken_owed is not None:  # an interrupt cut its telling: told now
            self._tell_broken()
        raise refusal(life.state, self._who(), life.why)

    def _tell_broken(self) -> None:
        """The BROKEN owed (messages sent, why) on both sockets, after every frame sent
        so far; never waits (a pipe at its mark: logged, that channel is not told)."""
        obs = self._observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterTellBroken -- the survivors learn the queue is broken, and why
        life = self._life
        self._send_owed(life.broken_owed or [], "BROKEN")
        life.broken_owed = None
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_TELL_BROKEN, life.seq)

    def _send_owed(self, parts: list[Any], what: str) -> None:
        """``parts`` on both sockets without waiting, then the local readers told the
        writer has ended (:meth:`_end_local_readers`) if their frame went out."""
        local_sent = False
        for side, sock in (("local", None if self._local is None else self._local.frames.socket),
                           ("remote", None if self._remote is None else self._remote.socket)):
            if sock is not None and not (sent := send_now(sock, parts)):
                logger.warning("%s: the %s readers were not told %s (a pipe at its mark): %s",
                               self._who(), side, what, self._life.why)
            local_sent = local_sent or (sock is not None and side == "local" and sent)
        self._end_local_readers(local_sent)

    def _end_local_readers(self, frame_sent: bool) -> None:
        """After a frame every reader must see (SHUTDOWN, BROKEN): if it went out on the
        local socket, store the ring's ended word, so a reader waits on its socket for
        the frame (still in flight, maybe) rather than blocking again; then wake the
        local readers asleep on the ring, so each looks now (``ReaderWake.tla``)."""
        local = self._local
        if local is not None:
            try:
                if frame_sent:
                    local.cursor.mark_ended()
            finally:  # an interrupt at the store's call still wakes every reader
                local.cursor.wake_all()

    def _break_interrupted(self, exc: BaseException | None, what: str, after: str) -> None:
        """``what`` raised (an interrupt too; ``None``: found by the next call) after
        ``after``: its sequence number is out, so the writer is broken for good (unless
        it already is)."""
        if self._life.state is not WriterState.BROKEN:
            how = "" if exc is None else f" ({type(exc).__name__})"
            self._break(f"broken since {what} was interrupted{how} after {after}")

    def _ring_stalled(
        self, local: LocalTransmitter, seq: int, exc: RingTimeoutError
    ) -> RingTimeoutError:
        ranks = [self.local_reader_ranks[i] for i in local.cursor.unread_by()]
        names = ", ".join(self._peers.name(r) for r in ranks)
        return RingTimeoutError(
            f"{self._who()} could not enqueue message seq {seq}: local reader ranks {ranks} "
            f"have not read the chunk it needs ({names}); ring: {exc}"
        )

