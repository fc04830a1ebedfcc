"""verifiedring: a formally modeled shared-memory broadcast ring and message queue.

The core (:mod:`~verifiedring.layout`, :mod:`~verifiedring.ordering`,
:mod:`~verifiedring.ring`) imports neither torch nor zmq. ``MessageQueue`` and
``Handle`` (ZeroMQ) are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    BrokenPeerError,
    BusyError,
    CancelledError,
    ClosedError,
    DecodeError,
    MessageAbortedError,
    MisuseError,
    RingTimeoutError,
    SharedMemoryFullError,
    VerifiedRingError,
)
from .layout import RingLayout
from .ring import ReaderCursor, RingHandle, ShmRingBuffer, WriterCursor
from .steps import QueueObserver, StepObserver
from .waiting import Deadline

if TYPE_CHECKING:
    from .queue import Handle, MessageQueue

__all__ = [
    "BrokenPeerError",
    "BusyError",
    "CancelledError",
    "ClosedError",
    "Deadline",
    "DecodeError",
    "Handle",
    "MessageAbortedError",
    "MessageQueue",
    "MisuseError",
    "QueueObserver",
    "ReaderCursor",
    "RingHandle",
    "RingLayout",
    "RingTimeoutError",
    "SharedMemoryFullError",
    "ShmRingBuffer",
    "StepObserver",
    "VerifiedRingError",
    "WriterCursor",
]

_LAZY = {"MessageQueue": "queue", "Handle": "queue"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
