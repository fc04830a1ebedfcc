"""Protocol step names shared by the spec, the code, the tests and traces.

Every shared-memory access of the ring protocol, and every step of the message
queue and of the tensor arena that a peer can see, is one *step*. Each step has
exactly one name, used verbatim as:

* the TLA+ action in its spec: ``spec/ring/RingBuffer.tla`` (:data:`ALL_STEPS`),
  ``spec/sleep/ReaderSleep.tla`` (:data:`SLEEP_STEPS`), ``spec/queue/MessageQueue.tla``
  (:data:`QUEUE_STEPS`), ``spec/arena/TensorArena.tla`` (:data:`ARENA_STEPS`);
* the ``# spec: <Name>`` comment at its one code site: ``cursors.py`` for the ring
  and sleep steps, the modules of :mod:`verifiedring.queue` for the queue's,
  ``arena.py`` for the arena's (the action tables of spec/'s family pages name the file of
  each);
* for the ring and the queue, the hypothesis rule that drives it
  (``tests/test_ring_stateful.py``, ``tests/test_queue_stateful.py``) and the
  ``action`` of a trace event (:class:`StepObserver`, :class:`QueueObserver`).

``tests/test_step_names.py`` checks that these agree, ``tests/test_docs.py`` that the
action tables of spec/'s family pages name the file of each code site.

A :class:`StepObserver` installed on a cursor sees every step before and after
it runs. With no observer installed a step costs one ``is None`` test.
"""

from __future__ import annotations

from typing import Final, Protocol

from .errors import MisuseError

# Writer steps, in protocol order.
WRITER_POLL_WRITTEN: Final = "WriterPollWritten"  # load written of its chunk
WRITER_POLL_READ_FLAG: Final = "WriterPollReadFlag"  # load read[r], once per reader (written=1)
WRITER_CLEAR_WRITTEN: Final = "WriterClearWritten"  # store written = 0
WRITER_FILL_PAYLOAD: Final = "WriterFillPayload"  # caller stores the payload
WRITER_ABORT: Final = "WriterAbort"  # caller raised: chunk stays unpublished
WRITER_CLEAR_READ_FLAG: Final = "WriterClearReadFlag"  # store read[r] = 0, once per reader
WRITER_PUBLISH: Final = "WriterPublish"  # store written = 1, advance index
WRITER_EXIT_CUT: Final = "WriterExitCut"  # __exit__ cut at its entry: the lease lets go

# Reader steps, in protocol order.
READER_POLL_READ_FLAG: Final = "ReaderPollReadFlag"  # load own read flag of its chunk
READER_POLL_WRITTEN: Final = "ReaderPollWritten"  # load written of its chunk (own flag was 0)
READER_READ_PAYLOAD: Final = "ReaderReadPayload"  # caller loads the payload
READER_RELEASE: Final = "ReaderRelease"  # store own read flag = 1, advance index
READER_EXIT_CUT: Final = "ReaderExitCut"  # __exit__ cut at its entry: the lease releases

WRITER_STEPS: Final = (
    WRITER_POLL_WRITTEN,
    WRITER_POLL_READ_FLAG,
    WRITER_CLEAR_WRITTEN,
    WRITER_FILL_PAYLOAD,
    WRITER_ABORT,
    WRITER_CLEAR_READ_FLAG,
    WRITER_PUBLISH,
    WRITER_EXIT_CUT,
)
READER_STEPS: Final = (
    READER_POLL_READ_FLAG, READER_POLL_WRITTEN, READER_READ_PAYLOAD, READER_RELEASE,
    READER_EXIT_CUT,
)
ALL_STEPS: Final = WRITER_STEPS + READER_STEPS

# Sleep-protocol steps (``spec/sleep/ReaderSleep.tla``; code sites in ``cursors.py``). A
# reader that outlasts its spin sleeps on its sleep word; the writer, after each
# WriterPublish, wakes the readers whose word it finds 1. Not in ALL_STEPS: the ring's
# trace validation (``spec/trace/TraceRingBuffer.tla``) replays only RingBuffer.tla's steps.
READER_ANNOUNCE_SLEEP: Final = "ReaderAnnounceSleep"  # store own sleep word = 1 (then FS1)
READER_BLOCK: Final = "ReaderBlock"  # re-check failed: futex wait while own word == 1
READER_END_SLEEP: Final = "ReaderEndSleep"  # store own sleep word = 0
WRITER_CHECK_SLEEP: Final = "WriterCheckSleep"  # after FS2: load every sleep word (one compare)
WRITER_CLEAR_SLEEP: Final = "WriterClearSleep"  # store sleep word r = 0, for each r seen 1
WRITER_WAKE: Final = "WriterWake"  # futex wake on sleep word r, right after its clear

SLEEP_STEPS: Final = (
    READER_ANNOUNCE_SLEEP,
    READER_BLOCK,
    READER_END_SLEEP,
    WRITER_CHECK_SLEEP,
    WRITER_CLEAR_SLEEP,
    WRITER_WAKE,
)

# The idle reader's other wake sources (``spec/sleep/ReaderWake.tla``; code sites in
# ``cursor_base.py`` and ``cursors.py``): no observer sees them.
CUTTER_SET_STOP: Final = "CutterSetStop"  # cut_sleep's caller stores what the reader sees
CUTTER_CLEAR_SLEEP: Final = "CutterClearSleep"  # cut_sleep: the reader's word = 0
CUTTER_WAKE: Final = "CutterWake"  # cut_sleep: futex wake on it
WRITER_WAKE_ALL_CLEAR: Final = "WriterWakeAllClear"  # wake_all: reader r's word = 0
WRITER_WAKE_ALL_WAKE: Final = "WriterWakeAllWake"  # wake_all: futex wake on it
WRITER_INTERRUPTED_IN_WAKE: Final = "WriterInterruptedInWake"  # publish's handler: wake_all
WRITER_MARK_ENDED: Final = "WriterMarkEnded"  # after SHUTDOWN or BROKEN's send: ended word = 1
READER_SEE_ENDED: Final = "ReaderSeeEnded"  # a failed re-check loads it; 1: own word = 0

WAKE_STEPS: Final = (
    CUTTER_SET_STOP,
    CUTTER_CLEAR_SLEEP,
    CUTTER_WAKE,
    WRITER_WAKE_ALL_CLEAR,
    WRITER_WAKE_ALL_WAKE,
    WRITER_INTERRUPTED_IN_WAKE,
    WRITER_MARK_ENDED,
    READER_SEE_ENDED,
)

WRITER_ACTOR: Final = "writer"


def reader_actor(reader: int) -> str:
    """The actor name of the reader with flag index ``reader`` ("reader0", ...)."""
    return f"reader{reader}"


class StepObserver(Protocol):
    """Sees each protocol step of one cursor.

    ``before_step`` runs before the step touches shared memory and may block
    (a deterministic scheduler uses this to run one actor at a time);
    ``after_step`` runs once the step's store or load has happened. ``chunk``
    is the chunk index the step acts on; ``reader`` is the read-flag index a
    ``WriterPollReadFlag`` step loads or a ``WriterClearReadFlag`` step
    clears, or the reader a ``WriterClearSleep`` / ``WriterWake`` is for, else
    ``None``. Production and observed runs execute the same
    statements: the observer only adds calls around them.
    """

    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None: ...

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None: ...


# Message-queue steps (``spec/queue/MessageQueue.tla``; code sites in ``verifiedring.queue``).
WRITER_HANDSHAKE: Final = "WriterHandshake"  # every subscription seen, then READY
WRITER_PUBLISH_CHUNK: Final = "WriterPublishChunk"  # the object inline, or its overflow marker
WRITER_PUBLISH_RUN_CHUNK: Final = "WriterPublishRunChunk"  # FIRST, MORE or LAST of a run
WRITER_ABORT_RUN: Final = "WriterAbortRun"  # ABORT ends a run whose pickling raised
WRITER_SEND_LOCAL_FRAME: Final = "WriterSendLocalFrame"  # an overflow frame, after its marker
WRITER_SEND_REMOTE_FRAME: Final = "WriterSendRemoteFrame"  # every message, within credit
WRITER_SEND_FAILS: Final = "WriterSendFails"  # a send after the publish failed: broken for good
WRITER_SHUTDOWN: Final = "WriterShutdown"  # SHUTDOWN(total) on both sockets
WRITER_INTERRUPTED_AFTER_PUBLISH: Final = "WriterInterruptedAfterPublish"  # seq is out
WRITER_READER_LEFT: Final = "WriterReaderLeft"  # a reader's connection closed: broken for good
WRITER_TELL_BROKEN: Final = "WriterTellBroken"  # BROKEN(total, why) on both sockets
READER_SUBSCRIBE: Final = "ReaderSubscribe"  # connect and announce the rank
READER_AWAIT_READY: Final = "ReaderAwaitReady"  # consume READY before any message
READER_TAKE_CHUNK: Final = "ReaderTakeChunk"  # consume an inline chunk, or take a marker
READER_READ_RUN_CHUNK: Final = "ReaderReadRunChunk"  # the run's next chunk: seq, part
READER_RELEASE_RUN_CHUNK: Final = "ReaderReleaseRunChunk"  # once consumed; LAST: delivered
READER_RECV_FRAME: Final = "ReaderRecvFrame"  # the pending marker's frame (stash first)
READER_TIMEOUT: Final = "ReaderTimeout"  # the frame wait ran out; the marker stays pending
READER_RESUME: Final = "ReaderResume"  # a dequeue after a timeout goes to the frame wait
READER_STASH: Final = "ReaderStash"  # a frame drained while waiting on the ring, kept in order
READER_SEE_SHUTDOWN: Final = "ReaderSeeShutdown"  # SHUTDOWN drained while waiting on the ring
READER_CLOSE: Final = "ReaderClose"  # ClosedError once all `total` messages are received
REMOTE_RECV_FRAME: Final = "RemoteRecvFrame"  # verify, consume, acknowledge
REMOTE_SEE_SHUTDOWN: Final = "RemoteSeeShutdown"  # SHUTDOWN in the remote frame stream
READER_SEE_BROKEN: Final = "ReaderSeeBroken"  # BROKEN drained from the local socket
READER_TOLD: Final = "ReaderTold"  # BrokenPeerError once the ring has nothing more
REMOTE_SEE_BROKEN: Final = "RemoteSeeBroken"  # BROKEN in the remote frame stream: raise
# Interrupts the next call reconciles (``spec/interrupts.md``): no observer sees them.
WRITER_INTERRUPTED_IN_RUN: Final = "WriterInterruptedInRun"  # a run cut: its abort is due
WRITER_SETTLE_RUN: Final = "WriterSettleRun"  # part count / end caught up from the cursor
WRITER_WITHDRAW_RUN: Final = "WriterWithdrawRun"  # cut before its first publish: nothing sent
WRITER_INTERRUPTED_BEFORE_PUBLISH: Final = "WriterInterruptedBeforePublish"  # claim let go
WRITER_INTERRUPTED_IN_TELL: Final = "WriterInterruptedInTell"  # BROKEN stays owed
READER_INTERRUPTED: Final = "ReaderInterrupted"  # a consumed message's outcome is owed
READER_PAY_OWED: Final = "ReaderPayOwed"  # the next dequeue returns or raises what is owed
#: The steps above that no observer sees: their ``# spec:`` sites sit inside other steps'
#: functions and start no step of their own.
UNOBSERVED_STEPS: Final = frozenset({
    WRITER_INTERRUPTED_IN_RUN, WRITER_SETTLE_RUN, WRITER_WITHDRAW_RUN,
    WRITER_INTERRUPTED_BEFORE_PUBLISH, WRITER_INTERRUPTED_IN_TELL, READER_INTERRUPTED,
    READER_PAY_OWED,
})

QUEUE_STEPS: Final = (
    WRITER_HANDSHAKE,
    WRITER_PUBLISH_CHUNK,
    WRITER_PUBLISH_RUN_CHUNK,
    WRITER_ABORT_RUN,
    WRITER_SEND_LOCAL_FRAME,
    WRITER_SEND_REMOTE_FRAME,
    WRITER_SEND_FAILS,
    WRITER_SHUTDOWN,
    WRITER_INTERRUPTED_AFTER_PUBLISH,
    WRITER_READER_LEFT,
    WRITER_TELL_BROKEN,
    READER_SUBSCRIBE,
    READER_AWAIT_READY,
    READER_TAKE_CHUNK,
    READER_READ_RUN_CHUNK,
    READER_RELEASE_RUN_CHUNK,
    READER_RECV_FRAME,
    READER_TIMEOUT,
    READER_RESUME,
    READER_STASH,
    READER_SEE_SHUTDOWN,
    READER_CLOSE,
    REMOTE_RECV_FRAME,
    REMOTE_SEE_SHUTDOWN,
    READER_SEE_BROKEN,
    READER_TOLD,
    REMOTE_SEE_BROKEN,
    WRITER_INTERRUPTED_IN_RUN,
    WRITER_SETTLE_RUN,
    WRITER_WITHDRAW_RUN,
    WRITER_INTERRUPTED_BEFORE_PUBLISH,
    WRITER_INTERRUPTED_IN_TELL,
    READER_INTERRUPTED,
    READER_PAY_OWED,
)


class QueueObserver(Protocol):
    """Sees each message-queue step of one queue end (trace validation).

    ``begin`` runs where a step starts to act on what a peer can see (it may
    block: a trace recorder takes its lock there); ``end`` once the step is
    over, naming the step that happened (a send that failed ends as
    ``WriterSendFails``, a frame wait that ran out as ``ReaderTimeout``).
    ``seq`` is the message's sequence number (SHUTDOWN's total for the shutdown
    steps, -1 where none); ``obj`` what the step published or delivered (a
    :class:`~verifiedring.errors.DecodeError` for a message that did not
    unpickle, ``None`` where nothing); ``kind`` what a chunk step published or
    took: "inline", "overflow" (a marker), or a run's "first", "more", "last",
    "abort" ("" for other steps). Every ``begin`` is followed by its ``end`` before
    that end's next ``begin``. With no observer a step costs one ``is None`` test.
    """

    def begin(self, actor: str) -> None: ...

    def end(
        self, actor: str, action: str, seq: int, obj: object = None, kind: str = ""
    ) -> None: ...


# Tensor-arena steps (``spec/arena/TensorArena.tla``; code sites in ``arena.py``). The spec's
# Queue* actions are the queue's own steps, not the arena's.
ARENA_CLAIM: Final = "ArenaClaim"  # a free (or never published) slot: seq, gen, owes = 1
ARENA_COPY: Final = "ArenaCopy"  # the tensor's bytes into the slot: the one copy
ARENA_FALLBACK: Final = "ArenaFallback"  # no free slot: out of band, the writer never waits
ARENA_REBUILD: Final = "ArenaRebuild"  # the reader's view over the slot
ARENA_RELEASE: Final = "ArenaRelease"  # the view's storage is freed: owes = 0
ARENA_DROP_RELEASE: Final = "ArenaDropRelease"  # an unviewed consumed slot (or any, at close)

ARENA_STEPS: Final = (
    ARENA_CLAIM, ARENA_COPY, ARENA_FALLBACK, ARENA_REBUILD, ARENA_RELEASE, ARENA_DROP_RELEASE
)


#: The methods each observer protocol calls.
STEP_OBSERVER_METHODS: Final = ("before_step", "after_step")
QUEUE_OBSERVER_METHODS: Final = ("begin", "end")


def require_observer(observer: object, methods: tuple[str, ...], protocol: str) -> None:
    """Raise :class:`MisuseError` naming ``observer`` unless it is ``None`` or has each
    of ``methods`` (``protocol``'s), callable: refused at construction, not at the
    first step."""
    if observer is None:
        return
    missing = [m for m in methods if not callable(getattr(observer, m, None))]
    if missing:
        raise MisuseError(
            f"observer={observer!r} is no {protocol}: it lacks {', '.join(missing)} (a "
            f"{protocol} has {', '.join(methods)}); pass one, or None"
        )
