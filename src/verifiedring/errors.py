"""The error taxonomy of verifiedring: one base class, six kinds.

Every message names the rule that was broken and the values that broke it,
so a log line alone tells an operator which process, reader and chunk is
involved and what was expected.

* :class:`MisuseError` -- the caller broke an API rule (bad geometry, wrong
  role, index out of range, a message too large; :class:`BusyError`: two
  threads in one queue end). Nothing shared was touched.
* :class:`RingTimeoutError` -- a bounded wait ran out; the ring stays usable
  and the same call may be retried.
* :class:`ClosedError` -- the channel was closed or shut down by its writer.
* :class:`CancelledError` -- a blocked call was woken on purpose (``shutdown()``
  on this end, or its ``cancel`` event); apart from :class:`ClosedError`, as
  trio keeps them apart: the channel itself may still be open.
* :class:`BrokenPeerError` -- a peer's state cannot be trusted: a segment is
  gone or has the wrong size, a frame failed authentication, a worker raised.
* :class:`DecodeError` -- one received message did not unpickle; it was
  consumed and the channel goes on with the next one.
"""

from __future__ import annotations


class VerifiedRingError(Exception):
    """Base class of every error raised by verifiedring."""


class MisuseError(VerifiedRingError, ValueError):
    """An API rule was broken by the caller; shared state is unchanged."""


class BusyError(MisuseError):
    """Two threads are inside one queue end's ``enqueue`` or ``dequeue`` at once (a
    queue end is used from one thread). The second call raises this before it
    touches any state; the first goes on unharmed."""


class SharedMemoryFullError(MisuseError, RuntimeError):
    """``/dev/shm`` cannot hold the segment: raised at construction, or by a write
    whose chunk's pages are reserved then (:mod:`verifiedring.reservation`), before
    any store; never a SIGBUS later.

    Not misuse: it is the environment (the machine's shared memory is full). Its
    bases are kept for vLLM compatibility, which raises ``RuntimeError`` and
    whose callers catch ``ValueError`` for a bad geometry; retrying once memory
    is freed is safe."""


class RingTimeoutError(VerifiedRingError, TimeoutError):
    """A bounded wait ran out before its condition held; retrying is safe."""


class ClosedError(VerifiedRingError):
    """The channel is closed, or its writer sent shutdown."""


class CancelledError(VerifiedRingError, RuntimeError):
    """A wait was cancelled: by ``shutdown()`` on its local reader (a blocked call is
    woken; after it, any call that would wait) or by its ``cancel`` event. Not a
    :class:`ClosedError`: ``except ClosedError`` does not swallow a cancel. A
    ``RuntimeError`` saying "cancelled", as vLLM's woken readers raise."""


class BrokenPeerError(VerifiedRingError):
    """A peer or the shared segment is in a state that cannot be trusted."""


class DecodeError(VerifiedRingError):
    """A received message could not be unpickled. It was consumed: the next call
    returns the next message, so one bad object never blocks the channel."""

    def __init__(self, seq: int, cause: BaseException, type_name: str | None = None) -> None:
        super().__init__(seq, cause, type_name)
        self.seq = seq
        self.cause = cause
        self.type_name = type_name
        #: Who received it (set by the queue end that raises it).
        self.receiver = ""

    def __str__(self) -> str:
        who = f"{self.receiver}: " if self.receiver else ""
        what = f" (an object of type {self.type_name})" if self.type_name else ""
        return (
            f"{who}message seq {self.seq}{what} could not be unpickled: "
            f"{type(self.cause).__name__}: {self.cause}; it was consumed, the next "
            "dequeue returns message seq "
            f"{self.seq + 1}"
        )


class MessageAbortedError(DecodeError):
    """The writer aborted a message streamed through the ring (its pickling raised, or
    it was interrupted, after some chunks were published). Consumed like a
    :class:`DecodeError`: the next call returns the next message."""

    def __init__(self, seq: int, part: int, reason: str) -> None:
        super().__init__(seq, RuntimeError(reason))
        self.part = part
        self.reason = reason

    def __str__(self) -> str:
        who = f"{self.receiver}: " if self.receiver else ""
        return (
            f"{who}message seq {self.seq} was aborted by the writer mid-message"
            f"{f' after {self.part} of its chunks' if self.part else ''} ({self.reason}); it "
            f"was consumed, the next dequeue returns message seq {self.seq + 1}"
        )


def require_int(name: str, value: object, least: int = 1) -> int:
    """``value`` if it is an int (not a bool) of at least ``least``; else a
    :class:`MisuseError` naming ``name``, the rule and the value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise MisuseError(f"{name} must be an int >= {least}, got {value!r}")
    return value
