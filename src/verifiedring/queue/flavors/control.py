"""A local reader's control channel: the writer's ipc socket beside the ring.

Besides the overflow flavor's frames, the writer's local XPUB carries READY, SHUTDOWN
and BROKEN. While a local reader waits on the ring (for a message, or a run's next
chunk) it looks at the socket every ``SLICE`` seconds: frames that arrived are stashed
in order (the overflow flavor's receiver takes them first), SHUTDOWN's total and BROKEN
are noted. Once BROKEN is noted, the reader takes what the ring still has (published
before BROKEN was sent), then raises :class:`BrokenPeerError` with the writer's reason
(:meth:`LocalControl.tell`).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, NoReturn

import zmq

from ...steps import (
    READER_SEE_BROKEN,
    READER_SEE_SHUTDOWN,
    READER_STASH,
    READER_TOLD,
    QueueObserver,
)
from .. import wire
from ..lifecycle import ReaderLifecycle
from ..outcomes import ReaderOutcomes
from ..sockets import pending_frames

#: How often a local reader blocked on the ring looks at its socket.
SLICE = 0.2
#: Once the writer has ended (the ring's ended word), the longest one re-check waits on
#: the socket for the writer's last frame (in flight) before its wait loops again.
FRAME_WAIT_MS = 1


class LocalControl:
    """A local reader's control channel: its ipc socket, looked at every ``SLICE``
    while the reader waits on the ring (frames that arrived are stashed in order,
    SHUTDOWN's total and BROKEN are noted) and however recent the last look once
    asked (:meth:`look_now`: the writer watch's ``on_lost``, from its thread)."""

    __slots__ = ("__weakref__", "_actor", "_check_at", "_life", "_observer", "_outcomes",
                 "sock", "stash")

    def __init__(self, sock: zmq.Socket[Any], life: ReaderLifecycle, outcomes: ReaderOutcomes,
                 observer: QueueObserver | None, actor: str) -> None:
        #: The reader's subscription to the writer's local XPUB.
        self.sock = sock
        # Invariant: frames received while waiting on the ring, in arrival order.
        self.stash: deque[list[zmq.Frame]] = deque()
        self._check_at = 0.0
        self._life = life
        self._outcomes = outcomes
        self._observer = observer
        self._actor = actor

    def look_now(self) -> None:
        """The next :meth:`look` drains the socket, however recent the last one."""
        self._check_at = 0.0

    def look(self) -> bool:
        """Drain the socket if a ``SLICE`` has passed since the last look; whether it did."""
        now = time.monotonic()
        if now < self._check_at:
            return False
        self._check_at = now + SLICE
        self._drain()
        return True

    def _drain(self) -> None:
        """Take every frame waiting on the socket: stash message frames in order, note
        SHUTDOWN's total."""
        sock = self.sock
        outcomes = self._outcomes
        while True:
            outcomes.mark_receive()
            frames = pending_frames(sock)
            if frames is None:
                self._life.receiving = False
                return
            if self.note_broken(frames):
                self._life.receiving = False
                continue
            kind, seq = outcomes.header(frames[0])[:2]
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
        self._life.shutdown_total = total
        if obs is not None:
            obs.end(self._actor, READER_SEE_SHUTDOWN, total)

    def _keep(self, frames: list[zmq.Frame], seq: int) -> None:
        """Message ``seq``'s frame, drained from the socket: stashed, in arrival order."""
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        # spec: ReaderStash -- the frame of a marker published since the last look
        self.stash.append(frames)
        if obs is not None:
            obs.end(self._actor, READER_STASH, seq)

    def note_broken(self, frames: list[zmq.Frame]) -> bool:
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

    def tell(self) -> NoReturn:
        """BROKEN was noted and nothing published is left: broken for good."""
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
        # spec: ReaderTold -- BrokenPeerError with the writer's reason, for good
        err = self._outcomes.told_broken()
        if obs is not None:
            obs.end(self._actor, READER_TOLD, self._life.seq)
        raise err

    def close(self) -> None:
        self.stash.clear()
        self.sock.close(linger=0)
