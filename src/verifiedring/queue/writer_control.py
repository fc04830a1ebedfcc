"""The writer's control channel: what it tells its readers besides messages.

READY ends the handshake; SHUTDOWN(total) follows the last message; BROKEN(total,
why) tells the readers the writer broke for good. Each goes on both sockets, after
every frame sent before it. A send that fails breaks the writer for good
(``WriterSendFails``), as a reader that leaves while the writer waits does
(``WriterReaderLeft``): what was published cannot be taken back, and a reader may
wait for it. A telling that an interrupt cut stays owed (the lifecycle's
``broken_owed``, ``shutdown_owed``) and goes out at the writer's next call or at
``close()``. Model: ``spec/queue/MessageQueue.tla``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, NoReturn

import zmq

from ..errors import BrokenPeerError, RingTimeoutError
from ..steps import (
    WRITER_ACTOR,
    WRITER_HANDSHAKE,
    WRITER_READER_LEFT,
    WRITER_SEND_FAILS,
    WRITER_SHUTDOWN,
    WRITER_TELL_BROKEN,
    QueueObserver,
)
from ..waiting import Deadline, StallLog, wait_readable
from . import wire
from .lifecycle import WriterLifecycle, WriterState, refusal
from .peers import Peers
from .sockets import send_now, welcome
from .transmitters import LocalTransmitter, RemoteTransmitter

logger = logging.getLogger("verifiedring")

#: A channel's send: ``(parts, what, seq, observer)``.
Send = Callable[[list[Any], str, int, "QueueObserver | None"], None]


def writer_name() -> str:
    """How messages name the writer: its process."""
    return f"writer (pid {os.getpid()})"


class WriterControl:
    """The writer's READY, SHUTDOWN and BROKEN on its sockets, and its break for good.

    It shares the writer's lifecycle (state, sequence number, what is owed), its
    transmitters and its readers (:class:`~.peers.Peers`); it holds no reference to
    the writer."""

    __slots__ = ("_life", "_local", "_local_ranks", "_observer", "_remote", "peers")

    def __init__(
        self, life: WriterLifecycle, local: LocalTransmitter | None,
        remote: RemoteTransmitter | None, peers: Peers, local_ranks: tuple[int, ...],
        observer: QueueObserver | None,
    ) -> None:
        self._life = life
        self._local = local
        self._remote = remote
        #: The readers the writer has seen join, and leave.
        self.peers = peers
        self._local_ranks = local_ranks  # by position in the ring
        self._observer = observer

    def handshake(self, deadline: Deadline, log_interval: float) -> None:
        """Wait for every reader to subscribe (a stall line every ``log_interval``
        seconds), then send READY: the writer is at CHUNK."""
        # spec: WriterHandshake -- every subscription first (essential), then READY
        peers = self.peers
        if not peers.complete():

            def timed_out(waited: float) -> RingTimeoutError:
                return RingTimeoutError(f"{peers.describe()}; timed out after {waited:.3f} s")

            log = StallLog(peers.describe, log_interval)
            wait_readable(peers.gather, deadline, log, timed_out)
        obs = self._observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        self.send_control([wire.control_header(wire.READY, 0)], "READY")
        for xpub in peers.sockets():
            welcome(xpub, wire.late_frame())  # a later subscriber is told it is late
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_HANDSHAKE, -1)
        if self._local is not None:
            self._local.after_handshake([peers.stall_name(r) for r in self._local_ranks])
        if self._remote is not None:
            self._remote.credit.start(set(peers.remote))
            self._remote.close_door()  # a later reader is refused at connect, writer idle or not
        self._life.ready()

    def send(self, send: Send, parts: list[Any], what: str, seq: int) -> None:
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
            self.break_for_good(f"broken since sending {what} failed: {exc}")
            raise

    def send_control(self, parts: list[Any], what: str) -> None:
        """A control message (READY, SHUTDOWN) on both sockets."""
        if self._local is not None:
            self.send(self._local.frames.send, parts, what, -1)
        if self._remote is not None:
            self.send(self._remote.send, parts, what, -1)

    def watch(self) -> None:
        """While the writer waits: a reader that left breaks the writer for good."""
        try:
            self.peers.watch()
        except BrokenPeerError as exc:
            obs = self._observer
            if obs is not None:
                obs.begin(WRITER_ACTOR)
                # spec: WriterReaderLeft -- a reader's connection closed: broken for good
                obs.end(WRITER_ACTOR, WRITER_READER_LEFT, self._life.seq)
            self.break_for_good(f"broken since a reader left: {exc}")
            raise

    def break_for_good(self, why: str) -> None:
        """Broken for good; readers past READY are told (:meth:`tell_broken`)."""
        if self._life.broke(why, wire.broken_frame(self._life.seq, why)):
            self.tell_broken()

    def break_interrupted(self, exc: BaseException | None, what: str, after: str) -> None:
        """``what`` raised (an interrupt too; ``None``: found by the next call) after
        ``after``: its sequence number is out, so the writer is broken for good (unless
        it already is)."""
        if self._life.state is not WriterState.BROKEN:
            how = "" if exc is None else f" ({type(exc).__name__})"
            self.break_for_good(f"broken since {what} was interrupted{how} after {after}")

    def refuse(self) -> NoReturn:
        """Raise why the writer cannot operate now; first let ZeroMQ run the sockets'
        pending commands, so a reader that subscribed since gets its welcome (LATE) even
        from a writer that only refuses (broken, shut down)."""
        for sock in self.peers.sockets():
            if not sock.closed:
                sock.getsockopt(zmq.EVENTS)
        life = self._life
        # spec: WriterInterruptedInTell -- a BROKEN whose telling was cut is still owed
        if life.broken_owed is not None:  # an interrupt cut its telling: told now
            self.tell_broken()
        raise refusal(life.state, writer_name(), life.why)

    def tell_broken(self) -> None:
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

    def tell_shutdown(self) -> None:
        """SHUTDOWN(total) on both sockets, after the last message; every later call
        refuses (:class:`ClosedError`)."""
        life = self._life
        life.enter(WriterState.SHUT, f"the queue was shut down after {life.seq} messages")
        obs = self._observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterShutdown -- SHUTDOWN(total) on both sockets, after the last message
        self.send_control([wire.control_header(wire.SHUTDOWN, life.seq)], "SHUTDOWN")
        life.shutdown_owed = False
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_SHUTDOWN, life.seq)
        self.end_local_readers(self._local is not None)

    def tell_owed(self) -> None:
        """As the sockets close: a BROKEN or a SHUTDOWN whose telling was cut (an
        interrupt in ``close()``) goes out now, so the readers learn the end, not only
        that the writer is gone."""
        life = self._life
        if life.broken_owed is not None:
            self.tell_broken()
        elif life.shutdown_owed:
            life.shutdown_owed = False
            self._send_owed([wire.control_header(wire.SHUTDOWN, life.seq)], "SHUTDOWN")

    def _send_owed(self, parts: list[Any], what: str) -> None:
        """``parts`` on both sockets without waiting, then the local readers told the
        writer has ended (:meth:`end_local_readers`) if their frame went out."""
        local_sent = False
        for side, sock in (("local", None if self._local is None else self._local.frames.socket),
                           ("remote", None if self._remote is None else self._remote.socket)):
            if sock is not None and not (sent := send_now(sock, parts)):
                logger.warning("%s: the %s readers were not told %s (a pipe at its mark): %s",
                               writer_name(), side, what, self._life.why)
            local_sent = local_sent or (sock is not None and side == "local" and sent)
        self.end_local_readers(local_sent)

    def end_local_readers(self, frame_sent: bool) -> None:
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

    def ring_stalled(
        self, local: LocalTransmitter, seq: int, exc: RingTimeoutError
    ) -> RingTimeoutError:
        """The error of a wait for room that timed out, naming who is stuck: the local
        readers that have not read the chunk message ``seq`` needs."""
        ranks = [self._local_ranks[i] for i in local.cursor.unread_by()]
        names = ", ".join(self.peers.name(r) for r in ranks)
        return RingTimeoutError(
            f"{writer_name()} could not enqueue message seq {seq}: local reader ranks {ranks} "
            f"have not read the chunk it needs ({names}); ring: {exc}"
        )
