"""The ways a message reaches local readers, each with its writer half and reader half.

=============  ===============================================================
flavor         what it delivers
=============  ===============================================================
inline         a message that fits one chunk, whole in it: the local
               transmitter's and the local reader's own path, one call into
               :mod:`..wire` each side (``encode_chunk`` / ``decode_chunk``)
``overflow``   a larger one (``large_objects="socket"``): a marker in the
               ring, the object as a frame on the local socket
``run``        a larger one (``large_objects="stream"``): a run of chunks,
               pickled into and unpickled out of the ring
=============  ===============================================================

The two large-object flavors implement one protocol pair: :class:`LargeSender`
(the writer's: ``MarkerSender``, ``RunSender``) and :class:`LargeReceiver` (the
local reader's: ``FrameReceiver``, ``RunReceiver``): a message's send and its take
go through them. What only a run has stays the run flavor's and is reached as such:
the writer's pickling straight into a run (``RunSender.dump``, without remote
readers) and the abort or withdrawal of a run a cut call left
(:class:`~..writer_cuts.CutCalls`); a local reader's run in progress across calls.

Beside them, a local reader's control channel (:mod:`.control`: the socket the
writer's READY, SHUTDOWN, BROKEN and overflow frames arrive on). The tensor arena is
no flavor: it is a plug-in of the serializer (:mod:`..serialization`) and composes
with all three.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

import zmq

from ...waiting import Deadline
from .. import wire

#: A chunk's header as :func:`..wire.decode_chunk` reads it: (kind, seq, nbytes, part).
Header = tuple[int, int, int, int]
#: What :meth:`LargeReceiver.unfinished` returns when nothing of the message is left to
#: deliver or report: the reader goes on with the next message.
NEXT: Final[Any] = object()


#: A reader's receive of a frame: ``recv(socket, deadline, what)``, with its stall lines,
#: its writer watch and the deadline.
Receive = Callable[[zmq.Socket[Any], Deadline, str], list[zmq.Frame]]


class LargeSender(Protocol):
    """A flavor's writer half: message ``seq`` whose encoding ``p`` does not fit one
    chunk, to the local readers. The writer lends it its ``watch`` for each call."""

    def send(
        self, seq: int, p: wire.Pickled, deadline: Deadline, watch: Callable[[], None],
        obj: Any,
    ) -> bool:
        """Publish message ``seq`` into the ring: true when its frame must still follow
        on the local socket (the overflow marker's), false when the ring carried it
        whole (a run). Raises :class:`RingTimeoutError` if its first chunk is not free
        by ``deadline`` (nothing published); ``obj`` is for the observer."""
        ...


class LargeReceiver(Protocol):
    """A flavor's reader half: a message that does not fit one chunk, begun by the
    ring chunk that starts it (an overflow marker; a run's FIRST). The reader lends
    it its waits for each call, so the receiver holds no reference back to it: its
    frame receive ``recv``, its ``watch`` while it waits (cancelled, the writer gone)
    and its stall-log ``interval`` (seconds, read when a wait first stalls)."""

    def begin(self, chunk: memoryview, header: Header) -> None:
        """The chunk taken, ``header``'s, starts a message of this flavor."""
        ...

    def take(
        self, deadline: Deadline, recv: Receive, watch: Callable[[], None],
        interval: Callable[[], float],
    ) -> Any:
        """The object of the message begun."""
        ...

    def unfinished(
        self, deadline: Deadline, recv: Receive, watch: Callable[[], None],
        interval: Callable[[], float],
    ) -> Any:
        """A dequeue after one that this flavor's message left unfinished (a timeout,
        an interrupt): its object, or its report raised; :data:`NEXT` if nothing of it
        is left."""
        ...
