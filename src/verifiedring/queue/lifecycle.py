"""The states of a queue end, named after ``spec/queue/MessageQueue.tla``'s ``wpc`` and ``rpc``.

Each value is the spec's word for it; the code adds only what the spec leaves
out (``closed``: ``close()`` was called; a reader's ``cancelled``: ``shutdown()``
on it). A state that refuses calls carries the error it raises
(:func:`refusal`), with the end's reason for being there.
"""

from __future__ import annotations

import enum
from typing import Any, Final, Generic, TypeVar

from ..errors import BrokenPeerError, ClosedError, MisuseError


class WriterState(enum.Enum):
    """The writer's ``wpc``. A call leaves it at CHUNK (or at RUN, an abort due),
    unless the writer shut down or broke."""

    HANDSHAKE = "handshake"  # before wait_until_ready(): refuses with MisuseError
    CHUNK = "chunk"  # ready: the next message is published into a ring chunk
    RUN = "run"  # a run is being written; left here by an interrupt: ABORT is due
    LOCAL = "local"  # a marker is published, its overflow frame not sent yet
    REMOTE = "remote"  # a message is published locally, its remote frame not sent yet
    REMOTE_ABORT = "remoteAbort"  # a run was aborted, its ABORT frame not sent yet
    SHUT = "shut"  # SHUTDOWN sent: refuses with ClosedError
    BROKEN = "broken"  # a send failed or was interrupted, or a reader left (the
    # spec's "broken", then "told" once BROKEN is sent: the code keeps one state)
    CLOSED = "closed"  # close() was called (the code's own)


class ReaderState(enum.Enum):
    """A reader's ``rpc``. A dequeue leaves it at IDLE, or -- interrupted or timed
    out -- at FRAME (the marker's frame awaited) or RUN (a run left mid-way)."""

    INIT = "init"  # before wait_until_ready(): refuses with MisuseError
    IDLE = "idle"  # ready for the next message
    FRAME = "frame"  # an overflow marker was taken; its frame is awaited
    RUN = "run"  # a run was left mid-way: the next dequeue skips its rest
    CLOSED = "closed"  # every message received after SHUTDOWN, or close()
    BROKEN = "broken"  # a message out of place, or the writer is gone
    TOLD = "told"  # the writer's BROKEN was seen and nothing more can come
    OWED = "owed"  # an interrupt cut a consumed message's unpickling: its DecodeError next


#: The error each refusing state raises; the reason says why the end is there.
_ERRORS: dict[enum.Enum, type[Exception]] = {
    WriterState.HANDSHAKE: MisuseError,
    WriterState.SHUT: ClosedError,
    WriterState.CLOSED: ClosedError,
    WriterState.BROKEN: BrokenPeerError,
    WriterState.LOCAL: BrokenPeerError,  # a call found a send interrupted: broken
    WriterState.REMOTE: BrokenPeerError,
    WriterState.REMOTE_ABORT: BrokenPeerError,
    ReaderState.INIT: MisuseError,
    ReaderState.CLOSED: ClosedError,
    ReaderState.BROKEN: BrokenPeerError,
    ReaderState.TOLD: BrokenPeerError,
}


def refusal(state: enum.Enum, who: str, why: str) -> Exception:
    """The error an end in ``state`` raises for a call it refuses."""
    return _ERRORS.get(state, MisuseError)(f"{who}: {why}")


S = TypeVar("S", WriterState, ReaderState)


class Lifecycle(Generic[S]):
    """One end's place in the spec's ``Next``: its state, the reason it is there, and
    the sequence number of the next message, owned here. :meth:`enter` changes state
    and reason; where a move must sit with other stores and no call between them (a
    message going out or being consumed, and its number used up), its site stores
    the fields plainly, as each role's class says (:class:`WriterLifecycle`,
    :class:`ReaderLifecycle`): a call there would be one more point for an
    interrupt to land between them. :meth:`advance` is the test seams' move.

    ``allowed`` is the end's transition table, the (from, to) pairs the spec's
    ``Next`` can take (``WRITER_TRANSITIONS`` / ``READER_TRANSITIONS``). It is
    checked only once :meth:`watch` turned checking on (an observer attached, the
    stateful tests), so the hot path pays one ``is None`` test. Each method is one
    run of plain stores with no call inside: an asynchronous exception lands at its
    entry (nothing changed) or after its return (all of it changed), never between.
    """

    __slots__ = ("_allowed", "seen", "seq", "state", "why")

    def __init__(self, initial: S, allowed: frozenset[tuple[S, S]]) -> None:
        self.state: S = initial
        self.why = ""
        # Invariant: the sequence number the next message of this end carries
        self.seq = 0
        self._allowed: frozenset[tuple[S, S]] = allowed
        #: every transition taken since :meth:`watch`; None: not checking
        self.seen: set[tuple[S, S]] | None = None

    def watch(self) -> set[tuple[S, S]]:
        """Turn the table check on; returns the set of transitions seen from now."""
        self.seen = set()
        return self.seen

    def enter(self, state: S, why: str = "") -> None:
        """Move to ``state`` (a reason replaces the last one; none keeps it)."""
        if self.seen is not None:
            self._check(state)
        self.state = state
        if why:
            self.why = why

    def _check(self, state: S) -> None:
        """Watched: refuse a move to ``state`` that is not in the table, else record it
        (before any store of the move: a raise here leaves nothing changed)."""
        seen = self.seen
        assert seen is not None
        pair = (self.state, state)
        if pair not in self._allowed and pair[0] is not pair[1]:
            raise AssertionError(
                f"{pair[0].name} -> {pair[1].name} is not a transition of the spec's Next"
            )
        seen.add(pair)

    def advance(self, seq: int) -> None:
        """The next message carries ``seq`` (a publish, a take or a skip used ``seq - 1``)."""
        self.seq = seq


_W = WriterState
#: The writer's moves: the (from, to) pairs of ``wpc`` in ``MessageQueue.tla``'s ``Next``,
#: each with its action, and the code's own (its CLOSED, a close() mid-run).
WRITER_TRANSITIONS: frozenset[tuple[WriterState, WriterState]] = frozenset((
    (_W.HANDSHAKE, _W.CHUNK),  # WriterHandshake
    (_W.CHUNK, _W.LOCAL),  # WriterPublishChunk: an overflow marker, its frame due
    (_W.CHUNK, _W.REMOTE),  # WriterPublishChunk: remote readers' frame due
    (_W.CHUNK, _W.RUN),  # WriterPublishRunChunk: FIRST (the code: from the pickling on)
    (_W.RUN, _W.CHUNK),  # WriterPublishRunChunk's LAST, WriterAbortRun: Finish
    (_W.RUN, _W.REMOTE),  # WriterPublishRunChunk's LAST, remote readers' frame due
    (_W.RUN, _W.REMOTE_ABORT),  # WriterAbortRun: the ABORT frame due
    (_W.LOCAL, _W.REMOTE),  # WriterSendLocalFrame: remote readers' frame due
    (_W.LOCAL, _W.CHUNK),  # WriterSendLocalFrame: Finish
    (_W.REMOTE, _W.CHUNK),  # WriterSendRemoteFrame: Finish
    (_W.REMOTE_ABORT, _W.CHUNK),  # WriterSendRemoteFrame (the ABORT frame): Finish
    (_W.LOCAL, _W.BROKEN),  # WriterSendFails, WriterReaderLeft
    (_W.REMOTE, _W.BROKEN),  # WriterSendFails, WriterReaderLeft
    (_W.REMOTE_ABORT, _W.BROKEN),  # WriterSendFails, WriterReaderLeft
    (_W.CHUNK, _W.BROKEN),  # WriterReaderLeft, WriterInterruptedAfterPublish (frames due)
    (_W.RUN, _W.BROKEN),  # WriterReaderLeft, WriterInterruptedAfterPublish (frames due)
    (_W.HANDSHAKE, _W.BROKEN),  # the code's: READY's send failed (WriterSendFails)
    (_W.CHUNK, _W.SHUT),  # WriterShutdown
    (_W.RUN, _W.SHUT),  # the code's: close() found a run it could not abort in time
    # (WriterTellBroken: the spec's "told" is the code's BROKEN, a self-move)
    *((s, _W.CLOSED) for s in WriterState),  # the code's: close()
))

#: The states in which the readers hear of a break: after READY, before SHUTDOWN.
_TOLD_OF_BREAKS = frozenset((_W.CHUNK, _W.RUN, _W.LOCAL, _W.REMOTE, _W.REMOTE_ABORT))


class WriterLifecycle(Lifecycle[WriterState]):
    """The writer's: its ``wpc``, reason and next sequence number, and what its readers
    are owed until it is sent (recorded with the state that owes it, cleared once
    sent): an interrupt that cuts the telling leaves it for the next refusal or
    ``close()`` to send. SHUTDOWN from READY on; a BROKEN's frame. Each method's
    stores run with no call between them (its check, watched, comes first). Where
    the next sequence number follows a publish store, or a break, the writer stores
    ``seq`` plainly: a call there would be one more point for an interrupt to land
    between the message going out and its number being used up."""

    __slots__ = ("broken_owed", "shutdown_owed")

    def __init__(self, why: str) -> None:
        super().__init__(WriterState.HANDSHAKE, WRITER_TRANSITIONS)
        self.why = why
        self.shutdown_owed = False
        # Invariant: the BROKEN frame the readers are owed (None: none is)
        self.broken_owed: list[Any] | None = None

    def ready(self) -> None:
        """READY is out: at CHUNK, SHUTDOWN owed from now on."""
        if self.seen is not None:
            self._check(_W.CHUNK)
        self.shutdown_owed = True
        self.state = _W.CHUNK

    def finish(self, seq: int) -> None:
        """The spec's ``Finish``: the call's message is out, the next carries ``seq``."""
        if self.seen is not None:
            self._check(_W.CHUNK)
        self.state = _W.CHUNK
        self.seq = seq

    def broke(self, why: str, frame: list[Any]) -> bool:
        """Broken for good; true when the readers are to be told (they are past READY and
        not told SHUTDOWN): ``frame``, the BROKEN owed, is recorded with the state."""
        told = self.state in _TOLD_OF_BREAKS
        if self.seen is not None:
            self._check(_W.BROKEN)
        if told:
            self.broken_owed = frame
            self.shutdown_owed = False
        self.state = _W.BROKEN
        self.why = why
        return told


_R = ReaderState
#: A reader's moves: the (from, to) pairs of ``rpc`` in ``MessageQueue.tla``'s ``Next``,
#: each with its action, and the code's own (OWED, its CLOSED by close()). The code
#: keeps the spec's "ready" / "runHeld" / "runReleased" in IDLE and RUN, and a timed
#: out frame wait in FRAME (the spec's ReaderTimeout + ReaderResume).
READER_TRANSITIONS: frozenset[tuple[ReaderState, ReaderState]] = frozenset((
    (_R.INIT, _R.IDLE),  # ReaderAwaitReady
    (_R.INIT, _R.BROKEN),  # the code's: LATE instead of READY, the writer gone, keys refused
    (_R.IDLE, _R.FRAME),  # ReaderTakeChunk: an overflow marker, its frame awaited
    (_R.IDLE, _R.RUN),  # ReaderTakeChunk: a run's FIRST
    (_R.IDLE, _R.OWED),  # ReaderTakeChunk, ReaderRecvFrame, RemoteRecvFrame: consumed
    (_R.IDLE, _R.BROKEN),  # ReaderTakeChunk, RemoteRecvFrame: out of place; writer gone
    (_R.IDLE, _R.TOLD),  # ReaderTold, RemoteSeeBroken
    (_R.IDLE, _R.CLOSED),  # ReaderClose
    (_R.FRAME, _R.OWED),  # ReaderRecvFrame: consumed
    (_R.FRAME, _R.IDLE),  # a lost frame's report (ReaderRecvFrame: its DecodeError)
    (_R.FRAME, _R.BROKEN),  # ReaderRecvFrame: out of place; the writer gone meanwhile
    (_R.FRAME, _R.TOLD),  # ReaderTold: BROKEN where the frame would be
    (_R.RUN, _R.IDLE),  # ReaderReleaseRunChunk's LAST (not decoded); a cut run skipped
    (_R.RUN, _R.OWED),  # ReaderReleaseRunChunk's LAST: the run's object delivered
    (_R.RUN, _R.BROKEN),  # ReaderReadRunChunk: a chunk out of place; the writer gone
    (_R.RUN, _R.TOLD),  # ReaderTold: BROKEN while the run waits
    (_R.RUN, _R.CLOSED),  # the code's: SHUTDOWN before the run's end
    (_R.OWED, _R.IDLE),  # the code's: the owed outcome delivered (the spec's Deliver)
    *((s, _R.CLOSED) for s in ReaderState),  # the code's: close()
))


class Owed:
    """A decoded object the next dequeue returns if an interrupt cuts its delivery (one
    per reader, made at its start: recording it takes no call)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj


class CutDecode:
    """The record a decode site stores with the sequence number's move, before the
    decode: a cut in the decode, or in the handling of its failure, leaves it, and the
    next dequeue raises that message's :class:`DecodeError` (the one message before
    the reader's sequence number). A decode that ends replaces it (the object, or the
    error it raised)."""

    __slots__ = ()


CUT_DECODE: Final = CutDecode()


class ReaderLifecycle(Lifecycle[ReaderState]):
    """A reader's: its ``rpc``, reason and next sequence number, what the next dequeue
    owes, and its receive mark (``spec/interrupts.md``). The moves that sit with other
    stores and no call between them (the sequence number moving as a message is
    consumed, the owed record, the receive mark, a run counted as cut) are plain stores
    on these fields at their sites, preceded when watched by :meth:`saw` (a check
    that stores nothing the reader reads); every other move goes through
    :meth:`enter`."""

    __slots__ = ("cut_receives", "delivery", "owed", "receiving", "shutdown_total")

    def __init__(self) -> None:
        super().__init__(ReaderState.INIT, READER_TRANSITIONS)
        self.why = "call wait_until_ready() before dequeue()"
        #: The record a decode site fills (``owed`` = it, state OWED) with plain stores.
        self.delivery = Owed(None)
        # Invariant: what the next dequeue returns or raises (an Owed, or a DecodeError)
        # is owed iff state is OWED.
        self.owed: Owed | Exception | CutDecode | None = None
        # A frame's receive is marked before it and unmarked once the frame is kept
        # (consumed or stashed); a mark found still set counts one receive an interrupt
        # cut, which may have taken a frame off the socket and lost it.
        self.receiving = False
        self.cut_receives = 0
        # Invariant: the writer's SHUTDOWN total once seen (never below seq), else None.
        self.shutdown_total: int | None = None

    def saw(self, state: ReaderState) -> bool:
        """Watched: the check of a move a site makes with plain stores next (true, so a
        site reads ``life.seen is None or life.saw(state)``: one test unwatched)."""
        self._check(state)
        return True
