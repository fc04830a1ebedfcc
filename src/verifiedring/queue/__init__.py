"""The object channel over the ring and ZeroMQ: vLLM's ``MessageQueue`` API.

=====================  =======================================================
module                 job
=====================  =======================================================
``message_queue``      :class:`MessageQueue`, vLLM's calls on every end, one type
                       per role (each its own typed constructor); its metaclass
                       :class:`QueueEntry`, how ends are made; :class:`EndParts`,
                       what an end shows of its parts for reading (``parts``)
``writer``             :class:`QueueWriter`, the end: vLLM's constructor, the
                       handle, the handshake, ``close()``; it holds its parts
``writer_parts``       what the writer is made of, built from checked options
``writer_path``        one message's path (serialize, credit, the local path,
                       the frames), ``acquire_write``'s chunk in place
``writer_control``     READY, SHUTDOWN, BROKEN to the readers; the break for good
``writer_cuts``        what a cut call left: a run's abort, a publish's settling;
                       ``close()``'s SHUTDOWN and its wait for remote readers
``transmitters``       the writer's ring side and TCP side
``local_reader``       :class:`LocalReader`, the end: the ring, its cursor, the arena
``local_path``         a local reader's path: the ring chunk, dispatched on kind
``held_chunk``         a local reader's taken chunk: lent to ``acquire_read``, or
                       left taken by an interrupt
``writer_watch``       a local reader's watch on its writer (the kernel says it went)
``remote_reader``      :class:`RemoteReader`, the end: its subscription over TCP
``remote_path``        a remote reader's path: every message over TCP, acked back
``reader``             what every reader end shares (identity, vLLM's calls)
``reader_path``        what every reader's path shares (dequeue, READY, SHUTDOWN)
``reader_waits``       what ends a reader's waits early, and their stall lines
``ages``               a stall line's last clause: how long since a message
``readiness``          vLLM 0.34's ``readable()`` look and ``spin_until_readable``
``remote_link``        a remote reader's connection, as its socket monitor says
``flavors``            how a message reaches local readers: inline, overflow
                       frame, run of chunks (each both halves); the control channel
``lifecycle``          the ends' states, named after the spec's ``wpc``/``rpc``
``outcomes``           a reader's errors: DecodeError (owed after an interrupt), broken, told
``credit``             flow control of remote readers (acks, floor, who lags)
``wire``               every byte on the wire: kinds, headers, chunks, frames,
                       runs, acks, hellos; the fit rule's sizes
``serialization``      pickle protocol 5, large buffers out of band
``sockets``            ZeroMQ endpoints, hello tags, bounded socket waits
``curve``              CurveZMQ keys and the ZAP gate of the remote channel
``peers``              the writer's readers: who joined, who left since
``handle``             the picklable :class:`Handle` and the reader-set rules
=====================  =======================================================
"""

from __future__ import annotations

from .handle import Handle
from .local_reader import LocalReader
from .message_queue import MessageQueue
from .remote_reader import RemoteReader
from .writer import QueueWriter

#: ``MessageQueue(...)`` and ``MessageQueue.create_from_handle(handle, rank)`` build one
#: of the three role classes; each is also its own typed constructor:
#: ``QueueWriter(...)``, ``LocalReader(handle, rank)``, ``RemoteReader(handle, rank)``
#: (a rank of the other role is refused, :class:`~verifiedring.errors.MisuseError`).
__all__ = ["Handle", "LocalReader", "MessageQueue", "QueueWriter", "RemoteReader"]
