"""The object channel over the ring and ZeroMQ: vLLM's ``MessageQueue`` API.

=====================  =======================================================
module                 job
=====================  =======================================================
``message_queue``      :class:`MessageQueue`, the entry point; one type per role
``writer``             :class:`QueueWriter`: ring chunks, overflow and remote frames
``local_reader``       :class:`LocalReader`: the ring, overflow frames from ipc
``remote_reader``      :class:`RemoteReader`: authenticated frames over TCP
``reader``             what every reader shares (sequence, READY, SHUTDOWN)
``credit``             flow control of remote readers (acks, floor, who lags)
``wire``               kinds, header, chunk and frame encoding beside decoding
``serialization``      pickle protocol 5, large buffers out of band
``sockets``            ZeroMQ endpoints, frame authentication, bounded socket waits
``handle``             the picklable :class:`Handle` and the reader-set rules
=====================  =======================================================
"""

from __future__ import annotations

from .handle import Handle
from .message_queue import MessageQueue

__all__ = ["Handle", "MessageQueue"]
