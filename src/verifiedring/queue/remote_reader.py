"""A remote reader end: every message as an authenticated frame over TCP, acked back."""

from __future__ import annotations

import logging
from collections.abc import Sized
from time import monotonic
from typing import Any

import zmq

from ..errors import BrokenPeerError, MessageAbortedError
from ..steps import REMOTE_RECV_FRAME, REMOTE_SEE_BROKEN, REMOTE_SEE_SHUTDOWN, QueueObserver
from ..waiting import Deadline
from . import wire
from .credit import ack_interval
from .curve import LATE_STATUS
from .handle import Handle, check_tag, remote_part
from .lifecycle import CUT_DECODE, ReaderState
from .reader import QueueReader, subscribe
from .readiness import remote_poll_ms
from .sockets import ack_push, pending_frames
from .wire import ack_message

logger = logging.getLogger("verifiedring")


def _queued(sock: zmq.Socket[Any]) -> bool:
    """Whether a frame is queued on ``sock`` for this process (no wait, no receive)."""
    events = sock.getsockopt(zmq.EVENTS)
    return isinstance(events, int) and bool(events & zmq.POLLIN)


_OWED = ReaderState.OWED


class RemoteReader(QueueReader):
    """A reader on another host: ``create_from_handle`` with a rank that is not local."""

    is_remote_reader = True
    channel = "remote"
    _shutdown_cancels = False  # vLLM's remote reader: shutdown() wakes nothing

    def __init__(self, handle: Handle, rank: int, observer: QueueObserver | None = None) -> None:
        super().__init__(handle, rank, observer)
        sub, ack, curve = remote_part(handle, rank)
        check_tag(handle, self._signer, self._who())
        self._ack_interval = ack_interval(handle.remote_window)
        self._acks_sent = 0
        self._disconnected = False  # a disconnect after READY: the writer is gone for good
        self._down = False  # the connection is closed now (it has been open before)
        self._refused = False  # the last connect was refused, none succeeded since
        #: A later message's frame that came where a frame lost to a cut receive was due.
        self._early: list[zmq.Frame] | None = None
        self._sock = subscribe(self, sub, handle.remote_window, curve, _EVENTS)
        try:
            self._monitor = self._sock.get_monitor_socket()  # the one made before the connect
            self._ack_sock = ack_push(self._ctx, ack, curve)
        except BaseException:
            self._sock.close(linger=0)
            raise
        self._closed = False

    def _socket(self) -> zmq.Socket[Any]:
        return self._sock

    def _next_frames(self, deadline: Deadline) -> list[zmq.Frame]:
        """The next message's frames: one kept early, else off the socket (the receive
        marked, until the frame is consumed)."""
        self._outcomes.mark_receive()
        frames = self._early
        if frames is not None:
            self._early = None
            return frames
        what = f"message seq {self._life.seq} on the remote socket"
        return self._recv(self._sock, deadline, what)

    def _dequeue(self, deadline: Deadline, poll: bool) -> Any:
        frames = self._next_frames(deadline)
        self._took_at = monotonic()  # its frame is here: before the step
        header = self._outcomes.header(frames[0])
        kind, seq = header[0], header[1]
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        if kind == wire.SHUTDOWN or kind == wire.BROKEN:
            raise self._end_of_stream(kind, seq, frames)
        got: Any = None
        try:
            # spec: RemoteRecvFrame -- consume, acknowledge (returns credit), decode; an
            # ABORT frame stands where the frame of a message aborted mid-run would be
            aborted = kind == wire.RUN_ABORT
            if aborted:
                kind = wire.OVERFLOW
            life = self._life
            if kind != wire.OVERFLOW or seq != life.seq:
                self._early = frames  # kept: the next dequeue's, if a lost one came before
                lost = self._outcomes.lost_frame(header[0], seq, life.seq)
                if lost is not None:
                    raise lost
                self._early = None
                raise self._outcomes.out_of_order("remote socket", header[0], seq)
            life.seen is None or life.saw(_OWED)  # checked if watched
            # consumed; owed from here on as its DecodeError unless the decode ends
            # (stores only: no call)
            life.seq = count = seq + 1
            life.owed = CUT_DECODE
            life.state = _OWED
            life.receiving = False
            try:
                # at every multiple of the interval (so at least floor(count / interval)
                # * interval are acknowledged, whatever idle acks came between), and
                # whenever no next frame is queued (this reader may go idle now: the
                # writer's close() then need not wait for an acknowledgement)
                every = self._ack_interval
                if count // every > self._acks_sent // every or not _queued(self._sock):
                    self._ack_sock.send(ack_message(self.rank, count))
                    self._acks_sent = count
                if aborted:
                    reason = wire.abort_reason(frames[1].buffer)
                    raise self._outcomes.named(MessageAbortedError(seq, 0, reason))
                got = self._outcomes.load_frame(seq, frames)
            except BaseException as exc:
                got = self._outcomes.failed(seq, exc)
                raise
            delivery = life.delivery  # owed if cut from here on (stores only: no call)
            delivery.obj = got
            life.owed = delivery
            life.state = _OWED
            return got
        finally:
            if obs is not None:
                obs.end(self._actor, REMOTE_RECV_FRAME, seq, got)

    def _look(self) -> bool:
        return bool(self._sock.poll(timeout=0))

    def spin_until_readable(self, pending: Sized, deadline: float) -> None:
        """vLLM 0.34's short wait on a remote reader: unless ``pending`` is non-empty,
        one poll of its socket for the remote poll wait (vLLM's ``REMOTE_POLL_WAIT_MS``),
        never past ``deadline``; the caller re-checks :meth:`readable`."""
        if len(pending) == 0:
            self._sock.poll(timeout=remote_poll_ms(deadline))

    def _end_of_stream(self, kind: int, total: int, frames: list[zmq.Frame]) -> Exception:
        """SHUTDOWN or BROKEN, the writer's last frame: what this dequeue raises."""
        if kind == wire.SHUTDOWN:
            self._see_shutdown(total)
            return self._outcomes.out_of_order("remote socket", kind, total)  # fewer than `total`
        if len(frames) != 2:
            return self._outcomes.out_of_order("remote socket", kind, total)
        # spec: RemoteSeeBroken -- the writer broke after `total` messages: no more
        self._outcomes.broke = (total, wire.abort_reason(frames[1].buffer))
        obs = self._observer
        if obs is not None:
            obs.end(self._actor, REMOTE_SEE_BROKEN, total)
        return self._outcomes.told_broken()

    def _see_shutdown(self, total: int) -> None:
        obs = self._observer
        # spec: RemoteSeeShutdown -- acknowledge every message received: the
        # writer's close() waits for that before its process may exit
        seq = self._life.seq
        if seq > self._acks_sent:
            self._ack_sock.send(ack_message(self.rank, seq))
            self._acks_sent = seq
        if obs is not None:
            obs.end(self._actor, REMOTE_SEE_SHUTDOWN, total)
        self._saw_shutdown(total)

    def _writer_lost(self) -> str | None:
        """Once READY came, a closed connection means the writer is gone (it died, or
        its heartbeats stopped for the queue's heartbeat timeout): PUB/SUB would lose
        frames. Before READY, it is gone while the connection stays closed (a
        reconnect within the reader's grace loses nothing: no frame was sent yet)."""
        while (event := pending_frames(self._monitor)) is not None:
            if _event_id(event) == zmq.EVENT_HANDSHAKE_FAILED_AUTH and \
                    _event_value(event) == LATE_STATUS:
                raise self._refused_late()
            failed = _HANDSHAKE_FAILED.get(_event_id(event))
            if failed is not None:
                raise self._refused_keys(failed)
            if _event_id(event) == zmq.EVENT_DISCONNECTED:
                self._down = True
                self._disconnected = self._disconnected or self._handshaken
            elif _event_id(event) == zmq.EVENT_CONNECT_RETRIED:  # refused: nobody listens
                self._down = self._refused = True
            else:  # the CURVE handshake with the writer succeeded: connected (again)
                self._down = self._refused = False
        if self._refused and not self._handshaken:
            return (f"nothing accepts connections at {self._handle.remote_subscribe_addr}: "
                    "the writer closed the queue or died")
        if self._disconnected or (self._down and not self._handshaken):
            curve = self._handle.curve
            bound = "" if curve is None else f"; heartbeat timeout {curve.heartbeat_timeout_ms} ms"
            return f"the connection to it closed{bound}"
        return None

    def _refused_late(self) -> BrokenPeerError:
        """The writer's gate refused the connection: its handshake was over."""
        why = (f"{self._outcomes.writer} refused its connection: its handshake is over (READY went "
               "to the readers that joined in time): a reader cannot join a running queue, "
               "nor attach as a rank that is no reader or whose remote slot is taken")
        self._stop(ReaderState.BROKEN, why)
        return BrokenPeerError(f"{self._who()}: {why}")

    def _refused_keys(self, how: str) -> BrokenPeerError:
        """The CURVE handshake failed: the writer is there and refused this reader's
        keys (ZeroMQ's socket monitor says how)."""
        why = (f"the CURVE handshake with {self._outcomes.writer} failed: {how}; handle.curve is "
               "not this queue's (altered, or another queue's): not a dead writer")
        self._stop(ReaderState.BROKEN, why)
        return BrokenPeerError(f"{self._who()}: {why}")

    def _release(self) -> None:
        self._sock.disable_monitor()
        self._monitor.close(linger=0)
        self._sock.close(linger=0)
        self._ack_sock.close(linger=0)


#: The socket monitor's handshake failures, and what each means.
_HANDSHAKE_FAILED: dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "authentication failed, the writer's authenticator "
                                     "denied this reader's keys",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "authentication failed, a CURVE protocol error",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "authentication did not complete (the server key "
                                          "is not the writer's, or the connection dropped)",
}
#: What the reader's monitor reports: the connection closing or refused, the handshake's end.
_EVENTS = (
    zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


def _event_id(event: list[zmq.Frame]) -> int:
    """The event of a socket monitor's message (its first frame: a 16-bit id, then a
    32-bit value)."""
    return int.from_bytes(event[0].bytes[:2], "little")


def _event_value(event: list[zmq.Frame]) -> int:
    """The 32-bit value of a socket monitor's message (a ZAP status code for an
    authentication failure)."""
    return int.from_bytes(event[0].bytes[2:6], "little")
