"""The overflow flavor: a marker in the ring, the object as a frame on the local socket.

``large_objects="socket"`` (the default). An object too large for one chunk
leaves its overflow marker (OVERFLOW + its ``seq``, :func:`..wire.encode_chunk`)
in the ring and travels as the frame with the same ``seq`` on the local ipc
XPUB, sent after the marker is published (:class:`FrameSender`, the writer
half; the socket carries READY and SHUTDOWN as well).

The reader half (:class:`OverflowReader`): ``pending`` is the sequence number
of a marker already taken from the ring whose frame has not been received yet
(state FRAME). A dequeue that took a marker releases the chunk at once (the
writer is never held up by a socket wait), then takes the frame -- stashed
while it waited on the ring, or received now; its sequence number must equal
``pending``. A timeout raises :class:`RingTimeoutError` and leaves ``pending``
set: the retry goes straight to the frame and returns that same object. While
it waits on the ring, the reader looks at its socket every ``SLICE`` seconds:
frames that arrive are stashed in order, SHUTDOWN and BROKEN are noted. Once
BROKEN is noted, the reader takes what the ring still has (published before
BROKEN was sent), then raises :class:`BrokenPeerError` with the writer's reason;
so does a frame wait that finds BROKEN where the frame would be.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, NoReturn

import zmq

from ...errors import RingTimeoutError
from ...ring import ReaderCursor
from ...steps import (
    READER_RECV_FRAME,
    READER_RESUME,
    READER_SEE_BROKEN,
    READER_SEE_SHUTDOWN,
    READER_STASH,
    READER_TIMEOUT,
    READER_TOLD,
    WRITER_ACTOR,
    WRITER_SEND_LOCAL_FRAME,
    QueueObserver,
)
from ...waiting import Deadline
from .. import wire
from ..lifecycle import CUT_DECODE, ReaderLifecycle, ReaderState
from ..outcomes import ReaderOutcomes
from ..sockets import LocalEndpoint, pending_frames, send_frames

#: How often a local reader blocked on the ring looks at its socket.
SLICE = 0.2
#: Once the writer has ended (the ring's ended word), the longest one re-check waits on
#: the socket for the writer's last frame (in flight) before its wait loops again.
FRAME_WAIT_MS = 1


_OWED = ReaderState.OWED


class FrameSender:
    """The writer half: every frame on the local socket, overflow frames observed."""

    def __init__(self, endpoint: LocalEndpoint, who: str) -> None:
        self.endpoint = endpoint
        #: What frames are sent on (the endpoint's XPUB; a fault seam may wrap it).
        self.socket: Any = endpoint.socket
        self._who = who

    def send(self, parts: list[Any], what: str, seq: int, obs: QueueObserver | None) -> None:
        """Send ``parts`` (message ``seq``'s frame, or with ``obs`` None a control
        message); raises :class:`BrokenPeerError` if the socket stays full."""
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterSendLocalFrame -- the payload, after its marker is published
        send_frames(self.socket, parts, what, self._who)
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_SEND_LOCAL_FRAME, seq)


class OverflowReader:
    """The reader half, a part of :class:`~..local_reader.LocalReader`: the marker's
    frame, the stash, the socket looked at while the reader waits on the ring."""

    _life: ReaderLifecycle
    _sock: zmq.Socket[Any]
    _cursor: ReaderCursor
    _observer: QueueObserver | None
    _actor: str
    _shutdown_total: int | None
    _outcomes: ReaderOutcomes

    def _init_overflow(self) -> None:
        # Invariant: the marker seq whose frame is awaited while _state is FRAME.
        self._pending = -1
        # Invariant: frames received while waiting on the ring, in arrival order.
        self._stash: deque[list[zmq.Frame]] = deque()
        self._socket_check_at = 0.0

    def _resume(self, deadline: Deadline) -> Any:
        """A dequeue after a timeout goes back to the pending frame."""
        obs = self._observer
        if obs is not None:
            # spec: ReaderResume -- a dequeue after a timeout goes back to the pending frame
            obs.begin(self._actor)
            obs.end(self._actor, READER_RESUME, self._pending)
        return self._take_frame(self._pending, deadline)

    def _take_frame(self, pending: int, deadline: Deadline) -> Any:
        obs = self._observer
        self._outcomes.mark_receive()  # a take from the stash too: one cut after it may lose it
        # spec: ReaderRecvFrame -- the stash first, in arrival order
        if self._stash:
            frames = self._stash.popleft()
        else:
            if self._outcomes.broke is not None:  # BROKEN came after every frame sent: not this one
                self._tell()
            try:
                frames = self._recv(
                    self._sock, deadline,
                    f"overflow frame seq {pending} on the local socket (its chunk is released)",
                )
            except RingTimeoutError:
                self._timed_out(pending)
                raise
            if self._note_broken(frames):
                self._tell()
        if obs is not None:
            obs.begin(self._actor)
        seq = -1
        got: Any = None
        try:
            kind, seq = self._parse_header(frames[0])[:2]
            if kind != wire.OVERFLOW or seq != pending:
                self._stash.appendleft(frames)  # kept first: a later marker's frame
                lost = self._outcomes.lost_frame(kind, seq, pending)
                if lost is not None:
                    self._life.enter(ReaderState.IDLE)
                    raise lost
                self._stash.popleft()
                raise self._outcomes.out_of_order("local socket", kind, seq)
            life = self._life
            life.seen is None or life.saw(_OWED)  # checked if watched
            # consumed before it is decoded; owed from here on as its DecodeError unless
            # the decode ends (stores only: no call)
            life.seq = seq + 1
            life.owed = CUT_DECODE
            life.state = _OWED
            life.receiving = False
            try:
                got = self._load_frame(seq, frames)
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
                obs.end(self._actor, READER_RECV_FRAME, seq, got)

    def _timed_out(self, pending: int) -> None:
        """The frame wait of marker ``pending`` ran out; the marker stays pending."""
        obs = self._observer
        if obs is not None:
            # spec: ReaderTimeout -- _pending stays set, so the retry returns this
            # same object (the known trap cannot happen)
            obs.begin(self._actor)
            obs.end(self._actor, READER_TIMEOUT, pending)

    def _ring_or_shutdown(self) -> bool:
        """The ring's next chunk is ready; every ``SLICE`` also drain the socket
        (stash frames, note SHUTDOWN: raises :class:`ClosedError` once all is read).
        Not ready after ``shutdown()``: raises :class:`CancelledError` (vLLM checks the
        ring first, so a published message is still returned)."""
        if self._cursor.poll():
            return True
        if self.shutting_down:
            self._cancelled()
        looked = self._look_at_socket()
        if self._outcomes.broke is not None:
            if self._cursor.poll():  # published before BROKEN was sent
                return True
            self._tell()
        if looked:
            total = self._shutdown_total
            if total is not None:
                self._saw_shutdown(total)
            self._watch()  # after SHUTDOWN: a writer that shut down and exited is not broken
        return False

    def _recheck_ring(self) -> bool:
        """The re-check before a block: :meth:`_ring_or_shutdown`; and once the writer
        has ended (its SHUTDOWN or BROKEN sent, maybe still in flight: the ring's ended
        word), a wait of at most ``FRAME_WAIT_MS`` on the socket and a look at it however
        recent the last one, with no block on the ring after it (ReaderWake.tla: the
        frame is seen however long its delivery takes, and no block outlasts it)."""
        if self._cursor.poll():
            return True
        if self._cursor.see_ended():
            self._sock.poll(FRAME_WAIT_MS)
            self._look_now()
        return self._ring_or_shutdown()

    def _look_now(self) -> None:
        """The next poll drains the socket (and watches the writer), however recent the
        last look (the writer watch's ``on_lost``, from its thread)."""
        self._socket_check_at = 0.0

    def _look_at_socket(self) -> bool:
        """Drain the socket if a SLICE has passed since the last look; whether it did."""
        now = time.monotonic()
        if now < self._socket_check_at:
            return False
        self._socket_check_at = now + SLICE
        self._drain_socket()
        return True

    def _drain_socket(self) -> None:
        """Take every frame waiting on the socket: stash message frames in order, note
        SHUTDOWN's total."""
        sock = self._sock
        while True:
            self._outcomes.mark_receive()
            frames = pending_frames(sock)
            if frames is None:
                self._life.receiving = False
                return
            if self._note_broken(frames):
                self._life.receiving = False
                continue
            kind, seq = self._parse_header(frames[0])[:2]
            if kind == wire.SHUTDOWN:
                self._note_shutdown(seq)
            else:
                self._keep(frames, seq)
            self._life.receiving = False

    def _note_shutdown(self, total: int) -> None:
        """SHUTDOWN(``total``) drained from the socket: its total is noted."""
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        # spec: ReaderSeeShutdown
        self._shutdown_total = total
        if obs is not None:
            obs.end(self._actor, READER_SEE_SHUTDOWN, total)

    def _keep(self, frames: list[zmq.Frame], seq: int) -> None:
        """Message ``seq``'s frame, drained from the socket: stashed, in arrival order."""
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        # spec: ReaderStash -- the frame of a marker published since the last look
        self._stash.append(frames)
        if obs is not None:
            obs.end(self._actor, READER_STASH, seq)

    def _note_broken(self, frames: list[zmq.Frame]) -> bool:
        """Whether ``frames`` is the writer's BROKEN; noted if so."""
        if len(frames) != 2 or frames[0].buffer.nbytes != wire.HEADER_BYTES:
            return False
        kind, total = wire.read_header(frames[0].buffer)[:2]
        if kind != wire.BROKEN:
            return False
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        # spec: ReaderSeeBroken -- the writer broke after `total` messages
        self._outcomes.broke = (total, wire.abort_reason(frames[1].buffer))
        if obs is not None:
            obs.end(self._actor, READER_SEE_BROKEN, total)
        return True

    def _tell(self) -> NoReturn:
        """BROKEN was noted and nothing published is left: broken for good."""
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        # spec: ReaderTold -- BrokenPeerError with the writer's reason, for good
        err = self._outcomes.told_broken()
        if obs is not None:
            obs.end(self._actor, READER_TOLD, self._life.seq)
        raise err

    if TYPE_CHECKING:  # what the reader provides (QueueReader)

        def _recv(
            self, sock: zmq.Socket[Any], deadline: Deadline, what: str
        ) -> list[zmq.Frame]: ...

        def _parse_header(self, first: zmq.Frame) -> tuple[int, int, int, int]: ...

        def _load_frame(self, seq: int, frames: list[zmq.Frame]) -> Any: ...

        def _saw_shutdown(self, total: int) -> None: ...

        def _watch(self) -> None: ...

        shutting_down: bool

        def _cancelled(self) -> NoReturn: ...
