"""What every reader end shares: identity, the expected sequence number, READY, SHUTDOWN."""

from __future__ import annotations

import enum
import functools
import os
from typing import Any, ClassVar

import zmq

from ..arena import ArenaReader
from ..errors import CancelledError
from ..steps import (
    READER_SUBSCRIBE,
    QueueObserver,
    reader_actor,
)
from ..waiting import Deadline
from .curve import CurveKeys
from .handle import Handle, check_attach
from .lifecycle import ReaderLifecycle, ReaderState
from .message_queue import MessageQueue, forwarded
from .outcomes import ReaderOutcomes
from .reader_path import ReaderPath
from .reader_waits import Cancel, ReaderWaits
from .sockets import Signer, hello_topic, hwm_for_window, subscriber

_IDLE = ReaderState.IDLE
_after = Deadline.after  # bound once: no bound method made per call


def reader_name(channel: str, rank: int) -> str:
    """How messages name a reader: its channel, rank and process."""
    place = "without a rank" if rank < 0 else f"rank {rank}"
    return f"{channel} reader {place} (pid {os.getpid()})"


class QueueReader(MessageQueue):
    """A reader end: receives every message exactly once, in the writer's order."""

    channel: str  # "local" or "remote", for messages
    #: The tensor arena's reader half (a local reader of a queue with one).
    _arena: ArenaReader | None = None
    _opening: ClassVar[enum.Enum] = ReaderState.INIT
    _closed_state: ClassVar[enum.Enum] = ReaderState.CLOSED
    #: Whether :meth:`shutdown` cancels this role's waits (a local reader's; as in
    #: vLLM, a remote reader's shutdown only sets ``shutting_down``).
    _shutdown_cancels: ClassVar[bool] = True
    _life: ReaderLifecycle
    #: The role's per-message path (its socket, and for a local reader the ring).
    _path: ReaderPath

    def __init__(self, handle: Handle, rank: int, observer: QueueObserver | None) -> None:
        check_attach(handle, rank, self.is_local_reader)  # a role's own constructor too
        self.rank = rank
        self._observer = observer
        self.n_reader = handle.n_reader
        self.local_reader_ranks = tuple(handle.local_reader_ranks)
        self.n_local_reader = len(self.local_reader_ranks)
        self.remote_window = handle.remote_window
        # Invariant: messages 0..seq-1 were each delivered (or raised DecodeError) exactly
        # once, in order; seq is the only one accepted next (every move checked if watched).
        self._life = life = ReaderLifecycle()
        if observer is not None:
            life.watch()
        self._handle = handle
        who = functools.partial(reader_name, self.channel, rank)
        #: What a call ends in when it does not return the message (errors, owed records,
        #: the writer's BROKEN once seen).
        self._outcomes = outcomes = ReaderOutcomes(  # no reference back: freed by refcount
            life, who, f"the writer (pid {handle.writer_pid} on host {handle.writer_host})",
        )
        #: What ends its waits early (shutdown, cancel, the writer gone), their stall lines.
        self._waits = ReaderWaits(life, outcomes, who, self._shutdown_cancels)
        self.log_interval = self._open()

    def _who(self) -> str:
        return reader_name(self.channel, self.rank)

    #: vLLM's flag, set by :meth:`shutdown` (from any thread): kept by the reader's waits.
    shutting_down: bool = forwarded("_waits", "shutting_down")
    #: Seconds between two stall lines of one wait: kept by the reader's waits.
    log_interval: float = forwarded("_waits", "log_interval")

    def export_handle(self) -> Handle:
        """The handle this reader attached with (vLLM hands it on)."""
        return self._handle

    def dequeue(
        self, timeout: float | None = None, *, cancel: Cancel | None = None,
        indefinite: bool = False,
    ) -> Any:
        """The next object, in the writer's order. Raises :class:`RingTimeoutError`
        after ``timeout`` seconds (retrying is safe), :class:`ClosedError` after
        shutdown, :class:`DecodeError` (message consumed) if it does not unpickle,
        :class:`CancelledError` when it would wait after :meth:`shutdown` (a message
        already published is still returned) or once ``cancel`` is set,
        :class:`BusyError` while another thread is inside this reader's dequeue.
        ``indefinite=True`` (a worker's busy loop): no stall warnings; where the engine
        policy's ``wait_after_shutdown`` is on (vLLM's compat), the writer's shutdown is
        not raised but waited out like a writer that sends nothing (until ``cancel``, or
        ``shutdown()`` on a local reader, or ``timeout``)."""
        return self._path.dequeue(timeout, cancel, indefinite)

    def shutdown(self) -> None:
        """Set ``shutting_down`` (vLLM's): from now on a local reader's dequeue that would
        wait raises :class:`CancelledError` instead, one blocked in another thread at
        once; a message already published is still returned. A remote reader's waits
        go on, as vLLM's (only ``cancel`` ends them)."""
        self.shutting_down = True

    def readable(self) -> bool:
        """vLLM 0.34's look, consuming nothing: whether a :meth:`dequeue` now returns or
        raises without waiting (the next message is at the head, or this reader's state
        ends the call at once). :class:`CancelledError` (a ``RuntimeError``, "cancelled")
        once ``shutting_down``."""
        if self.shutting_down:
            raise CancelledError(f"{self._who()}: readable() cancelled: shutdown() was called")
        return self._life.state is not _IDLE or self._path.look()

    def _handshake(self, deadline: Deadline) -> None:
        self._path.await_ready(deadline)


def subscribe(
    reader: QueueReader, address: str, window: int, curve: CurveKeys | None, events: int = 0
) -> zmq.Socket[Any]:
    """``reader``'s socket receiving the writer's frames on ``address``, ``window`` of them
    outstanding at most (over CURVE with ``curve``; its monitor reporting
    ``events`` from the start); the writer learns this reader's rank from it."""
    obs = reader._observer
    if obs is not None:
        obs.begin(reader_actor(reader.rank))
    # spec: ReaderSubscribe
    hello = hello_topic(Signer(reader._handle.hmac_key), reader.rank)
    sock = subscriber(reader._ctx, address, hwm_for_window(window), hello, curve, events)
    if obs is not None:
        obs.end(reader_actor(reader.rank), READER_SUBSCRIBE, -1)
    return sock
