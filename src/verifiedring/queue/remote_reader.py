"""A remote reader end: every message as an authenticated frame over TCP, acked back."""

from __future__ import annotations

import logging
from typing import Any

import zmq

from ..errors import MessageAbortedError, MisuseError
from ..steps import REMOTE_RECV_FRAME, REMOTE_SEE_BROKEN, REMOTE_SEE_SHUTDOWN, QueueObserver
from ..waiting import Deadline
from . import wire
from .credit import ack_interval
from .handle import Handle
from .lifecycle import ReaderState
from .reader import QueueReader
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
        curve = handle.curve
        if handle.remote_subscribe_addr is None or handle.remote_ack_addr is None or curve is None:
            raise MisuseError(
                f"rank {rank} is not in local_reader_ranks {list(self.local_reader_ranks)} "
                "and the queue has no remote readers (n_reader == n_local_reader)"
            )
        self._ack_interval = ack_interval(handle.remote_window)
        self._acks_sent = 0
        self._disconnected = False  # a disconnect after READY: the writer is gone for good
        self._down = False  # the connection is closed now (it has been open before)
        #: A later message's frame that came where a frame lost to a cut receive was due.
        self._early: list[zmq.Frame] | None = None
        self._sock = self._subscribe(handle.remote_subscribe_addr, handle.remote_window, curve)
        try:
            self._monitor = self._sock.get_monitor_socket(
                zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
            )
            self._ack_sock = ack_push(self._ctx, handle.remote_ack_addr, curve)
        except BaseException:
            self._sock.close(linger=0)
            raise
        self._closed = False

    def _socket(self) -> zmq.Socket[Any]:
        return self._sock

    def _next_frames(self, deadline: Deadline) -> list[zmq.Frame]:
        """The next message's frames: one kept early, else off the socket (the receive
        marked, until the frame is consumed)."""
        self._mark_receive()
        frames = self._early
        if frames is not None:
            self._early = None
            return frames
        return self._recv(self._sock, deadline, f"message seq {self._seq} on the remote socket")

    def _dequeue(self, deadline: Deadline, poll: bool) -> Any:
        frames = self._next_frames(deadline)
        header = self._parse_header(frames[0])
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
            if kind != wire.OVERFLOW or seq != self._seq:
                self._early = frames  # kept: the next dequeue's, if a lost one came before
                lost = self._lost_frame(header[0], seq, self._seq)
                if lost is not None:
                    raise lost
                self._early = None
                raise self._out_of_order("remote socket", header[0], seq)
            self._seq = count = seq + 1
            self._receiving = False
            try:  # consumed: from here an interrupt is owed as its DecodeError
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
                    raise self._named(MessageAbortedError(seq, 0, reason))
                got = self._load_frame(seq, frames)
            except BaseException as exc:
                got = self._failed(seq, exc)
                raise
            delivery = self._delivery  # owed if cut from here on (stores only: no call)
            delivery.obj = got
            self._owed = delivery
            self._state = _OWED
            return got
        finally:
            if obs is not None:
                obs.end(self._actor, REMOTE_RECV_FRAME, seq, got)

    def _end_of_stream(self, kind: int, total: int, frames: list[zmq.Frame]) -> Exception:
        """SHUTDOWN or BROKEN, the writer's last frame: what this dequeue raises."""
        if kind == wire.SHUTDOWN:
            self._see_shutdown(total)
            return self._out_of_order("remote socket", kind, total)  # fewer than `total`
        if len(frames) != 2:
            return self._out_of_order("remote socket", kind, total)
        # spec: RemoteSeeBroken -- the writer broke after `total` messages: no more
        self._broke = (total, wire.abort_reason(frames[1].buffer))
        obs = self._observer
        if obs is not None:
            obs.end(self._actor, REMOTE_SEE_BROKEN, total)
        return self._told_broken()

    def _see_shutdown(self, total: int) -> None:
        obs = self._observer
        # spec: RemoteSeeShutdown -- acknowledge every message received: the
        # writer's close() waits for that before its process may exit
        if self._seq > self._acks_sent:
            self._ack_sock.send(ack_message(self.rank, self._seq))
            self._acks_sent = self._seq
        if obs is not None:
            obs.end(self._actor, REMOTE_SEE_SHUTDOWN, total)
        self._saw_shutdown(total)

    def _writer_lost(self) -> str | None:
        """Once READY came, a closed connection means the writer is gone (it died, or
        its heartbeats stopped for the queue's heartbeat timeout): PUB/SUB would lose
        frames. Before READY, it is gone while the connection stays closed (a
        reconnect within the reader's grace loses nothing: no frame was sent yet)."""
        while (event := pending_frames(self._monitor)) is not None:
            if _event_id(event) == zmq.EVENT_DISCONNECTED:
                self._down = True
                self._disconnected = self._disconnected or self._handshaken
            else:  # the CURVE handshake with the writer succeeded: connected (again)
                self._down = False
        if self._disconnected or (self._down and not self._handshaken):
            curve = self._handle.curve
            bound = "" if curve is None else f"; heartbeat timeout {curve.heartbeat_timeout_ms} ms"
            return f"the connection to it closed{bound}"
        return None

    def _release(self) -> None:
        self._sock.disable_monitor()
        self._monitor.close(linger=0)
        self._sock.close(linger=0)
        self._ack_sock.close(linger=0)


def _event_id(event: list[zmq.Frame]) -> int:
    """The event of a socket monitor's message (its first frame: a 16-bit id, then a
    32-bit value)."""
    return int.from_bytes(event[0].bytes[:2], "little")
