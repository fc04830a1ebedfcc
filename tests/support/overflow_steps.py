"""Two seams of the overflow step machine (``tests/test_overflow_steps.py``).

:class:`RingGate` parks a local reader where its ring wait has just failed a poll;
:class:`PipeAtMark` puts a writer's local pipe at its high-water mark after a drawn
number of sends, at exactly that send.
"""

from __future__ import annotations

import sys
from typing import Any

from support.cursor_stand_in import CursorStandIn
from verifiedring import MessageQueue
from verifiedring.queue import wire
from verifiedring.queue.local_path import LocalPath
from verifiedring.ring import ReaderCursor
from verifiedring.testing.faults import local_frames, look_at_socket_next, reader_socket
from verifiedring.testing.scheduler import Scheduler

RING_WAIT = "ring wait"  # the reader's pending step while a RingGate holds it
LOOK = "look"  # what a RING_WAIT grant carries to make the reader drain its socket now
_RING_WAIT_CODE = LocalPath._ring_or_shutdown.__code__


class RingGate(CursorStandIn):
    """Stands in for a local reader's ring cursor: a poll that fails inside the
    reader's ring wait parks the reader (``actor``) at RING_WAIT until a rule grants
    it; granted LOOK, it waits until its socket holds a frame and drains the socket
    right after the poll (not when its periodic look is due)."""

    def __init__(self, cursor: ReaderCursor, sched: Scheduler, actor: str,
                 reader: MessageQueue, wait_ms: int) -> None:
        super().__init__(cursor)
        self.sched = sched
        self.actor = actor
        self.reader = reader
        self.sock = reader_socket(reader)
        self.wait_ms = wait_ms

    def poll(self) -> bool:
        if self.cursor.poll():
            return True
        in_ring_wait = sys._getframe(1).f_code is _RING_WAIT_CODE
        if in_ring_wait and self.sched.park(self.actor, (RING_WAIT,), -1)[1] == LOOK:
            assert self.sock.poll(self.wait_ms), "the frame sent never reached the reader"
            look_at_socket_next(self.reader)
        return False


class PipeAtMark:
    """The writer's local pipe ``room`` messages short of its high-water mark: the
    send after those fails as a send blocked at the mark does once its send timeout
    passes (``zmq.Again``, raised by the socket's stand-in,
    :func:`~verifiedring.testing.faults.local_frames`), at exactly that send; after
    :meth:`drain` every send goes through. (A real subscriber that reads nothing
    reaches the mark after a number of sends that depends on when libzmq's IO thread
    drains the pipe and reports it: the rules it enabled then differed between two
    runs of the same draws, which hypothesis refuses as a flaky strategy.)

    Made once the reader has joined (READY is sent); ``kinds`` lists the kind of each
    frame the writer then sent or tried to send, in order."""

    def __init__(self, writer: MessageQueue, room: int) -> None:
        self.frames = local_frames(writer)
        self.frames.before_send = self._saw
        self.frames.wedged = room == 0
        self.room = room  # messages its pipe still takes (-1: any, once drained)
        self.kinds: list[int] = []

    def _saw(self, parts: list[Any]) -> None:
        self.kinds.append(wire.read_header(parts[0])[0])

    def sent(self) -> None:
        """The writer sent one more message through the pipe."""
        self.room -= self.room > 0
        self.frames.wedged = self.room == 0

    def drain(self) -> None:
        """The subscriber at the other end has read everything: the pipe has room."""
        self.room = -1
        self.frames.wedged = False

    def close(self) -> None:
        self.frames.restore()
