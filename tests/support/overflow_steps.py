"""Two seams of the overflow step machine (``tests/test_overflow_steps.py``).

:class:`RingGate` parks a local reader where its ring wait has just failed a poll;
:class:`WedgedSubscriber` puts a writer's local pipe at its high-water mark for real.
"""

from __future__ import annotations

import sys
from typing import Any

import zmq

from support.cursor_stand_in import CursorStandIn
from verifiedring import MessageQueue
from verifiedring.queue import wire
from verifiedring.queue.flavors.overflow import OverflowReader
from verifiedring.ring import ReaderCursor
from verifiedring.testing.faults import (
    look_at_socket_next,
    reader_socket,
    send_frame,
    writer_sockets,
)
from verifiedring.testing.scheduler import Scheduler

RING_WAIT = "ring wait"  # the reader's pending step while a RingGate holds it
LOOK = "look"  # what a RING_WAIT grant carries to make the reader drain its socket now
_RING_WAIT_CODE = OverflowReader._ring_or_shutdown.__code__
FILL = bytes(1 << 20)  # a fill frame: larger than a socket buffer


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


class WedgedSubscriber:
    """A SUB on ``writer``'s local socket that reads nothing until :meth:`drain`.

    Made before any reader joins, it is sent ``pipe_messages - 1 - room`` fill frames
    (to it alone), so once READY is sent the writer's pipe to it takes ``room`` more
    messages: libzmq's pipe takes ``pipe_messages`` (the XPUB's SNDHWM) before a send
    blocks, as the subscriber's side holds only a few frames this large, fewer than
    the batch of read reports ((hwm + 1) // 2) that would tell the writer of room. A
    send blocked there fails after ``send_timeout_ms`` (the writer's option, shortened).
    """

    def __init__(self, writer: MessageQueue, pipe_messages: int, room: int,
                 send_timeout_ms: int, wait_ms: int) -> None:
        address = writer.export_handle().local_subscribe_addr
        assert address is not None
        self.sock: zmq.Socket[Any] = zmq.Context.instance().socket(zmq.SUB)
        self.sock.setsockopt(zmq.RCVHWM, 1)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(address)
        xpub = writer_sockets(writer)[0]
        assert xpub is not None and xpub.poll(wait_ms), "the subscription never arrived"
        self.xpub = xpub
        xpub.setsockopt(zmq.SNDTIMEO, send_timeout_ms)
        for _ in range(pipe_messages - 1 - room):
            send_frame(writer, "local", [wire.control_header(wire.READY, 0), FILL])
        self.room = room  # messages its pipe still takes (-1: any, once drained)
        self.queued = pipe_messages - room  # messages sent to it (READY too); read:
        self.drained = 0
        self.wait_ms = wait_ms

    def sent(self) -> None:
        """The writer sent it one more message."""
        self.queued += 1
        self.room -= self.room > 0

    def drain(self) -> None:
        """Read every message it was sent, in order; then the writer's socket is made
        to run its commands (the writer's thread is parked), so the pipe has room."""
        while self.drained < self.queued:
            assert self.sock.poll(self.wait_ms), f"{self.drained} of {self.queued} arrived"
            self.sock.recv_multipart()
            self.drained += 1
        self.room = -1
        self.xpub.getsockopt(zmq.EVENTS)

    def close(self) -> None:
        self.sock.close(linger=0)
