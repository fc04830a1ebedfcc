"""A remote reader's path: every message as an authenticated frame over TCP, acked back."""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic
from typing import Any

import zmq

from ..errors import MessageAbortedError
from ..steps import REMOTE_RECV_FRAME, REMOTE_SEE_BROKEN, REMOTE_SEE_SHUTDOWN, QueueObserver
from ..waiting import Deadline
from . import wire
from .credit import ack_interval
from .lifecycle import CUT_DECODE, ReaderLifecycle, ReaderState
from .outcomes import ReaderOutcomes
from .reader_path import ReaderPath
from .reader_waits import ReaderWaits
from .remote_link import RemoteLink
from .wire import ack_message


def _queued(sock: zmq.Socket[Any]) -> bool:
    """Whether a frame is queued on ``sock`` for this process (no wait, no receive)."""
    events = sock.getsockopt(zmq.EVENTS)
    return isinstance(events, int) and bool(events & zmq.POLLIN)


_OWED = ReaderState.OWED


class RemotePath(ReaderPath):
    """A remote reader's per-message path, over its subscription and its ack socket."""

    def __init__(  # noqa: PLR0913 -- the end's parts it shares, each named
        self, rank: int, sock: zmq.Socket[Any], ack_sock: zmq.Socket[Any], link: RemoteLink,
        window: int, life: ReaderLifecycle, outcomes: ReaderOutcomes, waits: ReaderWaits,
        observer: QueueObserver | None, actor: str, who: Callable[[], str],
    ) -> None:
        super().__init__(life, outcomes, waits, observer, actor, who)
        self.rank = rank
        self._sock = sock
        self._ack_sock = ack_sock
        #: What the socket's monitor says of the connection (made before the connect).
        self._link = link
        self._ack_interval = ack_interval(window)
        self._acks_sent = 0
        #: A later message's frame that came where a frame lost to a cut receive was due.
        self._early: list[zmq.Frame] | None = None

    @property
    def socket(self) -> zmq.Socket[Any]:
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
        return self._waits.recv(self._sock, deadline, what)

    def take(self, deadline: Deadline, poll: bool) -> Any:
        frames = self._next_frames(deadline)
        self._waits.took_at = monotonic()  # its frame is here: before the step
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

    def look(self) -> bool:
        return bool(self._sock.poll(timeout=0))

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

    def _let_go(self) -> None:
        self._sock.disable_monitor()
        self._link.monitor.close(linger=0)
        self._sock.close(linger=0)
        self._ack_sock.close(linger=0)
