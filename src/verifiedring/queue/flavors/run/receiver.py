"""The run flavor's receiver: a run's object for a local reader's dequeue, and the
reader's state as the run ends or after one a dequeue left mid-way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ....errors import (
    BrokenPeerError,
    CancelledError,
    ClosedError,
    DecodeError,
    MessageAbortedError,
)
from ....ring import ReaderCursor
from ....steps import QueueObserver
from ....waiting import Deadline
from ...lifecycle import ReaderLifecycle, ReaderState
from ...outcomes import ReaderOutcomes
from .. import NEXT, Header, Receive
from ..control import LocalControl
from .reader import NOT_DECODED, RunReader, no_interval, unwatched

_IDLE = ReaderState.IDLE
_OWED = ReaderState.OWED
_RUN = ReaderState.RUN
_CUT_AS_BEGUN = "cut as its run began"


class RunReceiver:
    """The run flavor's reader half (a :class:`..LargeReceiver`): the object of a run
    whose FIRST chunk was taken. A broken run (a chunk out of place) breaks the reader
    for good. Left mid-way (an interrupt, a cancel), the message is not lost unseen: the
    next dequeue raises DecodeError."""

    def __init__(
        self, cursor: ReaderCursor, life: ReaderLifecycle, outcomes: ReaderOutcomes,
        control: LocalControl, observer: QueueObserver | None, actor: str,
    ) -> None:
        self.run = RunReader(cursor, outcomes, observer, actor)
        self._cursor = cursor
        self._life = life
        self._outcomes = outcomes
        self._control = control
        #: The reader's own watch (cancel, the writer gone) while a call here waits.
        self._reader_watch: Callable[[], None] = unwatched
        #: (seq, why) of the run a dequeue left mid-way, else ``None``.
        self.interrupted: tuple[int, str] | None = None
        #: The run's object once decoded (before its LAST's release: a cut there finds
        #: it), else NOT_DECODED.
        self.decoded: Any = NOT_DECODED

    def begin(self, chunk: memoryview, header: Header) -> None:
        """The taken chunk is a run's FIRST: the run holds it on. The run counts as cut
        until its load ends (stores only: no call before the sequence number moves): the
        next dequeue skips its rest and reports it."""
        seq = header[1]
        life = self._life
        life.seen is None or life.saw(_RUN)  # checked if watched
        self.interrupted = (seq, _CUT_AS_BEGUN)
        life.state = _RUN
        life.seq = seq + 1  # consumed before it is decoded
        self.run.begin(seq, chunk, header[2])

    def take(
        self, deadline: Deadline, recv: Receive, watch: Callable[[], None],
        interval: Callable[[], float],
    ) -> Any:
        """:meth:`load` (its waits watched by the reader's, with no deadline: a run
        begun is read to its end), and the reader's state as the run ends: its object,
        if decoded, owed until ``dequeue`` returns it; else IDLE (a run left mid-way
        stays RUN: the next dequeue skips its rest, :meth:`unfinished`)."""
        self.decoded = NOT_DECODED
        try:
            return self.load(watch, interval)
        finally:
            # the run is over (else the next dequeue skips its rest): its object, if
            # decoded, is owed until dequeue returns it (stores only: no call)
            life = self._life
            if self.interrupted is None and life.state is _RUN:
                got = self.decoded
                move = _IDLE if got is NOT_DECODED else _OWED
                life.seen is None or life.saw(move)  # checked if watched
                self.decoded = NOT_DECODED
                if got is NOT_DECODED:
                    life.state = _IDLE
                else:
                    delivery = life.delivery
                    delivery.obj = got
                    life.owed = delivery
                    life.state = _OWED

    def load(self, watch: Callable[[], None], interval: Callable[[], float]) -> Any:
        """The run's object (its FIRST chunk taken by ``run.begin``), its waits for the
        next chunk watched by ``watch`` and logged every ``interval()`` s.
        :attr:`interrupted` is set before (the reader's): cleared once the run is over."""
        run = self.run
        self._reader_watch = watch  # this call's (plain stores; cleared as it ends)
        run.watch = self._watch_run
        run.stall_interval = interval
        try:
            got = self._unpickle()
        except MessageAbortedError as exc:
            self.interrupted = None
            raise self._outcomes.named(exc) from None
        except BrokenPeerError as exc:
            self.interrupted = None
            self._outcomes.broken(f"broken since message seq {run.seq}'s run: {exc}")
            raise
        except BaseException as exc:
            self.interrupted = (
                (run.seq, f"{type(exc).__name__}: {exc}".rstrip(": ")) if run.active else None
            )
            raise
        finally:
            run.watch = self._reader_watch = unwatched
            run.stall_interval = no_interval
        self.interrupted = None
        return got

    def _watch_run(self) -> None:
        """While the run waits for its next chunk: the reader's watch (cancelled, the
        writer gone), and a look at the control channel: BROKEN with nothing more in the
        ring, or SHUTDOWN before the run's end (the writer could not abort it), raise."""
        self._reader_watch()
        control = self._control
        control.look()
        if self._outcomes.broke is not None and not self._cursor.poll():
            control.tell()
        total = self._life.shutdown_total
        run = self.run
        if total is not None and total <= run.seq:
            why = (
                f"the writer shut the queue down after {total} messages, in the middle of "
                f"message seq {run.seq}'s run (part {run.part} read)"
            )
            self._life.enter(ReaderState.CLOSED, why)
            raise ClosedError(f"{self._outcomes.who()}: {why}")

    def _unpickle(self) -> Any:
        run = self.run
        seq = run.seq
        try:
            got = run.load()
        except (BrokenPeerError, ClosedError, CancelledError):  # the writer gone, or woken
            raise
        except DecodeError:  # MessageAbortedError: the writer aborted the run
            raise
        except Exception as exc:
            # the run goes on to its LAST (or ABORT) first: the next dequeue starts after it
            err = self._outcomes.named(DecodeError(seq, exc, None))
            run.skip_rest(err)
            raise err from exc
        if not run.at_end:
            err = self._outcomes.named(DecodeError(
                seq, ValueError("the run has bytes after the end of its pickle stream")
            ))
            run.skip_rest(err)
            raise err
        self.decoded = got
        run.skip_rest(got)  # its LAST: released, the object delivered
        return got

    def unfinished(
        self, deadline: Deadline, recv: Receive, watch: Callable[[], None],
        interval: Callable[[], float],
    ) -> Any:
        """A dequeue after one left mid-run: skip the rest of that run (its waits as
        :meth:`take`'s) and raise its DecodeError, owed first (stores only, as the
        run's record clears: a cut after the skip leaves it to the next dequeue); left
        mid-way again (an interrupt, a cancel), the state stays RUN. :data:`NEXT`
        (IDLE) when the run was over after all."""
        interrupted = self.interrupted
        life = self._life
        if interrupted is None:
            life.enter(_IDLE)
            return NEXT
        life.seen is None or life.saw(_OWED)  # checked if watched
        err = self.finish_interrupted(*interrupted, watch, interval)
        life.owed = err
        life.state = _OWED
        return self._outcomes.pay_owed()

    def finish_interrupted(
        self, seq: int, why: str, watch: Callable[[], None],
        interval: Callable[[], float],
    ) -> DecodeError:
        """Skip the rest of the run a dequeue left mid-way (its waits as :meth:`load`'s);
        the DecodeError to raise for its message (consumed: the next dequeue returns the
        next message)."""
        run = self.run
        self._reader_watch = watch  # this call's (plain stores; cleared as it ends)
        run.watch = self._watch_run
        run.stall_interval = interval
        cause: BaseException = RuntimeError(
            f"the dequeue reading it was interrupted mid-run ({why}); the rest of its run "
            "was skipped"
        )
        try:
            if run.seq != seq:  # cut before the run began: its FIRST is released
                run.resume(seq)
            if run.active:
                run.skip_rest(self._outcomes.named(DecodeError(seq, cause)))
        except MessageAbortedError as exc:  # the writer aborted it meanwhile
            cause = exc.cause
        except BrokenPeerError as exc:
            self._outcomes.broken(f"broken since message seq {seq}'s run: {exc}")
            raise
        finally:
            run.watch = self._reader_watch = unwatched
            run.stall_interval = no_interval
        err = self._outcomes.named(DecodeError(seq, cause))
        self.interrupted = None  # after the error is made: a cut before leaves it owed
        return err
