"""A remote reader's view of its connection to the writer, from its socket's monitor.

ZeroMQ reconnects a SUB socket by itself and says nothing to its user; the socket's
monitor reports each connection closing (``DISCONNECTED``), each refused connect
(``CONNECT_RETRIED``) and each CURVE handshake's end (succeeded, or failed and
why). :class:`RemoteLink` reads them and says what they mean for the reader's
waits: the writer gone (its process died, or its heartbeats stopped), nothing
listening, or this reader refused (its handshake came too late, or its keys are
not the queue's), each named.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmq

from ..errors import BrokenPeerError
from .curve import LATE_STATUS
from .handle import Handle
from .lifecycle import ReaderLifecycle, ReaderState
from .sockets import pending_frames

#: What the reader's monitor reports: the connection closing or refused, the handshake's end.
MONITORED_EVENTS = (
    zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)
#: The socket monitor's handshake failures, and what each means.
_HANDSHAKE_FAILED: dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "authentication failed, the writer's authenticator "
                                     "denied this reader's keys",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "authentication failed, a CURVE protocol error",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "authentication did not complete (the server key "
                                          "is not the writer's, or the connection dropped)",
}


class RemoteLink:
    """The connection as the monitor reports it: down now, refused, disconnected
    after READY. It shares the reader's lifecycle (whether READY came; BROKEN entered
    when the writer refused this reader) and holds no reference to the reader."""

    __slots__ = ("_disconnected", "_down", "_handle", "_life", "_refused", "_who",
                 "_writer", "monitor")

    def __init__(self, monitor: zmq.Socket[Any], life: ReaderLifecycle, handle: Handle,
                 who: Callable[[], str], writer: str) -> None:
        #: The PAIR socket the subscriber's monitor reports on (made before the connect).
        self.monitor = monitor
        self._life = life
        self._handle = handle
        self._who = who
        self._writer = writer
        self._disconnected = False  # a disconnect after READY: the writer is gone for good
        self._down = False  # the connection is closed now (it has been open before)
        self._refused = False  # the last connect was refused, none succeeded since

    def lost(self) -> str | None:
        """How the writer is gone, else ``None``. Once READY came, a closed connection
        means the writer is gone (it died, or its heartbeats stopped for the queue's
        heartbeat timeout): PUB/SUB would lose frames. Before READY, it is gone while
        the connection stays closed (a reconnect within the reader's grace loses
        nothing: no frame was sent yet). Raises :class:`BrokenPeerError` (the reader
        BROKEN) when the writer refused this reader."""
        handshaken = self._life.state is not ReaderState.INIT
        while (event := pending_frames(self.monitor)) is not None:
            if _event_id(event) == zmq.EVENT_HANDSHAKE_FAILED_AUTH and \
                    _event_value(event) == LATE_STATUS:
                raise self._refused_late()
            failed = _HANDSHAKE_FAILED.get(_event_id(event))
            if failed is not None:
                raise self._refused_keys(failed)
            if _event_id(event) == zmq.EVENT_DISCONNECTED:
                self._down = True
                self._disconnected = self._disconnected or handshaken
            elif _event_id(event) == zmq.EVENT_CONNECT_RETRIED:  # refused: nobody listens
                self._down = self._refused = True
            else:  # the CURVE handshake with the writer succeeded: connected (again)
                self._down = self._refused = False
        if self._refused and not handshaken:
            return (f"nothing accepts connections at {self._handle.remote_subscribe_addr}: "
                    "the writer closed the queue or died")
        if self._disconnected or (self._down and not handshaken):
            curve = self._handle.curve
            bound = "" if curve is None else f"; heartbeat timeout {curve.heartbeat_timeout_ms} ms"
            return f"the connection to it closed{bound}"
        return None

    def _refused_late(self) -> BrokenPeerError:
        """The writer's gate refused the connection: its handshake was over."""
        why = (f"{self._writer} refused its connection: its handshake is over (READY went "
               "to the readers that joined in time): a reader cannot join a running queue, "
               "nor attach as a rank that is no reader or whose remote slot is taken")
        self._life.enter(ReaderState.BROKEN, why)
        return BrokenPeerError(f"{self._who()}: {why}")

    def _refused_keys(self, how: str) -> BrokenPeerError:
        """The CURVE handshake failed: the writer is there and refused this reader's
        keys (ZeroMQ's socket monitor says how)."""
        why = (f"the CURVE handshake with {self._writer} failed: {how}; handle.curve is "
               "not this queue's (altered, or another queue's): not a dead writer")
        self._life.enter(ReaderState.BROKEN, why)
        return BrokenPeerError(f"{self._who()}: {why}")


def _event_id(event: list[zmq.Frame]) -> int:
    """The event of a socket monitor's message (its first frame: a 16-bit id, then a
    32-bit value)."""
    return int.from_bytes(event[0].bytes[:2], "little")


def _event_value(event: list[zmq.Frame]) -> int:
    """The 32-bit value of a socket monitor's message (a ZAP status code for an
    authentication failure)."""
    return int.from_bytes(event[0].bytes[2:6], "little")
