"""The overflow flavor: a marker in the ring, the object as a frame on the local socket.

``large_objects="socket"`` (the default). An object too large for one chunk
leaves its overflow marker (OVERFLOW + its ``seq``, :func:`..wire.encode_chunk`)
in the ring and travels as the frame with the same ``seq`` on the local ipc
XPUB, sent after the marker is published (the writer half: :class:`MarkerSender`
publishes the marker, :class:`FrameSender` sends the frame; the socket carries
READY and SHUTDOWN as well).

The reader half (:class:`FrameReceiver`), over the local reader's control channel
(:class:`..control.LocalControl`: the socket, the stash, SHUTDOWN's and BROKEN's
notes): ``pending`` is the sequence number
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

from collections.abc import Callable
from typing import Any

import zmq

from ...errors import RingTimeoutError
from ...steps import (
    READER_RECV_FRAME,
    READER_RESUME,
    READER_TIMEOUT,
    WRITER_ACTOR,
    WRITER_SEND_LOCAL_FRAME,
    QueueObserver,
)
from ...waiting import Deadline
from .. import wire
from ..lifecycle import CUT_DECODE, ReaderLifecycle, ReaderState
from ..outcomes import ReaderOutcomes
from ..sockets import LocalEndpoint, send_frames
from . import Header, Receive
from .control import LocalControl

_OWED = ReaderState.OWED
_HEADER_BYTES = wire.HEADER_BYTES

#: The local transmitter's publish of one chunk: ``(seq, p, inline, stored, deadline,
#: watch, obj)``, ``stored`` the bytes it stores (their pages reserved before the claim).
PublishChunk = Callable[[int, wire.Pickled, bool, int, Deadline, Callable[[], None], Any], None]


class MarkerSender:
    """The socket flavor's writer half in the ring (a :class:`LargeSender`): the
    overflow marker, one chunk; the frame follows on the local socket
    (:class:`FrameSender`), sent by the writer after any remote reader's credit."""

    __slots__ = ("_publish_chunk",)

    def __init__(self, publish_chunk: PublishChunk) -> None:
        self._publish_chunk = publish_chunk

    def send(
        self, seq: int, p: wire.Pickled, deadline: Deadline, watch: Callable[[], None],
        obj: Any,
    ) -> bool:
        self._publish_chunk(seq, p, False, _HEADER_BYTES, deadline, watch, obj)
        return True


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


class FrameReceiver:
    """The socket flavor's reader half (a :class:`LargeReceiver`): the frame of the
    overflow marker a dequeue took (``pending``, state FRAME), from the stash first,
    else received now."""

    __slots__ = ("_actor", "_control", "_life", "_observer", "_outcomes", "pending")

    def __init__(self, control: LocalControl, life: ReaderLifecycle, outcomes: ReaderOutcomes,
                 observer: QueueObserver | None, actor: str) -> None:
        # Invariant: the marker seq whose frame is awaited while the reader's state is FRAME.
        self.pending = -1
        self._control = control
        self._life = life
        self._outcomes = outcomes
        self._observer = observer
        self._actor = actor

    def begin(self, chunk: memoryview, header: Header) -> None:
        """The chunk taken (``header``'s) is an overflow marker: it is released now and
        its frame awaited."""
        self.pending = header[1]
        self._life.enter(ReaderState.FRAME)

    def unfinished(
        self, deadline: Deadline, recv: Receive, watch: Callable[[], None],
        interval: Callable[[], float],
    ) -> Any:
        """A dequeue after a timeout goes back to the pending frame."""
        obs = self._observer
        if obs is not None:
            # spec: ReaderResume -- a dequeue after a timeout goes back to the pending frame
            obs.begin(self._actor)
            obs.end(self._actor, READER_RESUME, self.pending)
        return self.take(deadline, recv, watch, interval)

    def take(
        self, deadline: Deadline, recv: Receive, watch: Callable[[], None],
        interval: Callable[[], float],
    ) -> Any:
        """The pending marker's object: its frame, from the stash or received now."""
        pending = self.pending
        obs = self._observer
        control = self._control
        outcomes = self._outcomes
        outcomes.mark_receive()  # a take from the stash too: one cut after it may lose it
        # spec: ReaderRecvFrame -- the stash first, in arrival order
        frames = control.stash.popleft() if control.stash else self._receive(deadline, recv)
        if obs is not None:
            obs.begin(self._actor)
        seq = -1
        got: Any = None
        try:
            kind, seq = outcomes.header(frames[0])[:2]
            if kind != wire.OVERFLOW or seq != pending:
                control.stash.appendleft(frames)  # kept first: a later marker's frame
                lost = outcomes.lost_frame(kind, seq, pending)
                if lost is not None:
                    self._life.enter(ReaderState.IDLE)
                    raise lost
                control.stash.popleft()
                raise outcomes.out_of_order("local socket", kind, seq)
            life = self._life
            life.seen is None or life.saw(_OWED)  # checked if watched
            # consumed before it is decoded; owed from here on as its DecodeError unless
            # the decode ends (stores only: no call)
            life.seq = seq + 1
            life.owed = CUT_DECODE
            life.state = _OWED
            life.receiving = False
            try:
                got = outcomes.load_frame(seq, frames)
            except BaseException as exc:
                got = outcomes.failed(seq, exc)
                raise
            delivery = life.delivery  # owed if cut from here on (stores only: no call)
            delivery.obj = got
            life.owed = delivery
            life.state = _OWED
            return got
        finally:
            if obs is not None:
                obs.end(self._actor, READER_RECV_FRAME, seq, got)

    def _receive(self, deadline: Deadline, recv: Receive) -> list[zmq.Frame]:
        """The pending marker's frame, received now (the stash is empty); BROKEN where
        it would be (or noted before) raises: broken for good."""
        control = self._control
        if self._outcomes.broke is not None:  # BROKEN came after every frame sent: not this one
            control.tell()
        pending = self.pending
        try:
            frames = recv(
                control.sock, deadline,
                f"overflow frame seq {pending} on the local socket (its chunk is released)",
            )
        except RingTimeoutError:
            self._timed_out(pending)
            raise
        if control.note_broken(frames):
            control.tell()
        return frames

    def _timed_out(self, pending: int) -> None:
        """The frame wait of marker ``pending`` ran out; the marker stays pending."""
        obs = self._observer
        if obs is not None:
            # spec: ReaderTimeout -- pending stays set, so the retry returns this
            # same object (the known trap cannot happen)
            obs.begin(self._actor)
            obs.end(self._actor, READER_TIMEOUT, pending)
