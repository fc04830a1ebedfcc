"""What a writer's call left unfinished, settled by its handler or by the next call.

An asynchronous exception (KeyboardInterrupt, a signal handler's raise) can land
between any two of a call's Python steps; a timeout can end a call mid-run. What
is left is one of: a run begun and not ended (its ABORT is due, or its
withdrawal), a publish whose store happened and whose bookkeeping did not (the
sequence number is used up; frames still due break the writer), a publish begun
and never settled (the claim is let go, or the message is out). Each is recorded
where it happens (the run writer's ``active`` and ``ended``, the local
transmitter's ``committing`` and ``published``) and settled here. Model:
``spec/queue/MessageQueue.tla`` (``WriterInterruptedAfterPublish``,
``WriterInterruptedInRun``, ``WriterSettleRun``, ``WriterWithdrawRun``,
``WriterAbortRun``); ``spec/interrupts.md`` lists every window.
"""

from __future__ import annotations

import logging

from ..errors import RingTimeoutError
from ..waiting import Deadline
from . import wire
from .flavors.run.writer import RunSender, RunWriter
from .lifecycle import WriterLifecycle, WriterState
from .transmitters import LocalTransmitter, RemoteTransmitter
from .writer_control import WriterControl, writer_name

logger = logging.getLogger("verifiedring")

_CHUNK = WriterState.CHUNK
_RUN = WriterState.RUN


class CutCalls:
    """The writer's settling of its cut calls: a run's abort, a publish interrupted
    after its store, a publish's bookkeeping never finished. It shares the writer's
    lifecycle, transmitters, run sender and control channel; it holds no reference
    to the writer."""

    __slots__ = ("_control", "_life", "_local", "_remote", "_runs")

    def __init__(
        self, life: WriterLifecycle, local: LocalTransmitter | None,
        remote: RemoteTransmitter | None, runs: RunSender | None, control: WriterControl,
    ) -> None:
        self._life = life
        self._local = local
        self._remote = remote
        self._runs = runs
        self._control = control

    def abort_run(self, run: RunWriter, reason: str, deadline: Deadline) -> None:
        """End the unfinished run with ABORT (remote readers get an ABORT frame):
        its sequence number is used up. A timeout leaves the abort due. A run cut
        before its first publish is withdrawn instead (nothing sent, the number
        unused); one whose LAST or ABORT was out (only its bookkeeping cut) is over,
        and with remote readers, whose frame of it never went, the writer is broken."""
        seq = run.seq
        run.settle()
        life = self._life
        if not run.active:  # its LAST or ABORT was out: seq used
            if self._remote is not None:  # its remote frame is due: as a cut send
                self._control.break_interrupted(None, f"publishing message seq {seq}",
                                                "its run's last chunk was published")
            life.seq = seq + 1  # plain: no call between the catch-up (or break) and it
            return
        if run.part == 0:
            run.withdraw()
            return
        try:
            run.abort(reason, deadline)
        except BaseException as exc:
            if run.ended == seq:  # interrupted after the ABORT's store: seq is out
                if self._remote is not None:  # its ABORT frame is due: broken
                    self._control.break_interrupted(exc, f"aborting message seq {seq}",
                                                    "its ABORT was published")
                    life.seq = seq + 1
                else:
                    life.finish(seq + 1)
            raise
        remote = self._remote
        if remote is not None:
            life.enter(WriterState.REMOTE_ABORT)
            try:
                self._control.send(
                    remote.send, wire.abort_frame(seq, reason), f"abort frame seq {seq}", seq
                )
            except BaseException as exc:  # also KeyboardInterrupt: seq {seq} is out
                self._control.break_interrupted(
                    exc, f"sending the abort frame of message seq {seq}", "its ABORT was published"
                )
                raise
        life.finish(seq + 1)

    def settle(self, timeout: float | None) -> Deadline:
        """The deadline of a call made while not at CHUNK: a run left mid-way is
        aborted first (a timeout leaves the abort due); one whose end is out but
        whose call was cut before it counted the sequence number is over
        (:meth:`abort_run`); any other state refuses."""
        runs, life = self._runs, self._life
        if life.state is WriterState.REMOTE_ABORT:  # its ABORT frame went, its end was cut
            life.finish(life.seq + 1)
            return Deadline.after(timeout)
        if life.state is not _RUN or runs is None:
            self._control.refuse()
        deadline = Deadline.after(timeout)
        if runs.active or runs.run.ended == life.seq:  # due; or over, its end uncounted
            try:
                self.abort_run(runs.run, "the writer was interrupted mid-message", deadline)
            except RingTimeoutError as exc:  # still due: the next call tries again
                if self._local is not None:
                    raise self._control.ring_stalled(self._local, runs.run.seq, exc) from None
                raise
        if life.state is WriterState.BROKEN:  # the abort found its frame unsent
            self._control.refuse()
        life.enter(_CHUNK)
        return deadline

    def local_path_raised(
        self, exc: BaseException, seq: int, local: LocalTransmitter,
        remote: RemoteTransmitter | None,
    ) -> None:
        """Message ``seq``'s local path (one chunk or a run) raised: mid-run, the run's ABORT is
        due; after its publish store (a run's: its LAST's), ``seq`` is used up."""
        runs = self._runs
        if runs is not None and runs.active:
            self._life.enter(_RUN)
        elif local.published[0] == seq:
            self.published_then_interrupted(exc, seq, local.published[1], remote)
        elif runs is not None and runs.run.ended == seq:  # a run's LAST, its frame due
            self.published_then_interrupted(exc, seq, True, remote)

    def settle_commit(self, local: LocalTransmitter) -> None:
        """A call's publish of message ``seq`` = the next one was begun and its
        bookkeeping never finished (an interrupt, and another in its handling): if its
        chunk is still held, the claim lets it go; if its publish store happened, the
        message is out (:meth:`published_then_interrupted`)."""
        seq, inline, i = local.committing
        cursor = local.cursor
        if not cursor.holding and cursor.settle(i):
            local.published = (seq, inline)
            self.published_then_interrupted(None, seq, inline, self._remote)

    def published_then_interrupted(
        self, exc: BaseException | None, seq: int, inline: bool,
        remote: RemoteTransmitter | None,
    ) -> None:
        """An asynchronous exception landed after message ``seq``'s publish store (in
        the rest of the publish, or at the return of the call): ``seq`` is used up.
        With frames still due (its overflow frame, the remote one) the writer is
        broken, as when sending them is interrupted (BROKEN says ``seq`` messages were
        completed); else the message is sent."""
        # spec: WriterInterruptedAfterPublish -- the sequence number is never reused
        if remote is not None or not inline:
            self._control.break_interrupted(exc, f"publishing message seq {seq}",
                                            "its publish store")
        self._life.seq = seq + 1  # plain: no call between the break (if any) and it

    def tell_readers(self, linger_s: float) -> None:
        """``close()``'s telling: SHUTDOWN(total) on both sockets, after the last
        message (a run left unfinished is aborted first, in at most ``linger_s``);
        nothing once the writer is broken or was never ready. Afterwards every call
        refuses (:class:`ClosedError`)."""
        state = self._life.state
        if state is not _CHUNK and state is not _RUN:
            return  # before the handshake, told already or broken: nothing to tell
        runs = self._runs
        if runs is not None and runs.active:
            try:
                self.abort_run(runs.run, "the writer closed mid-message", Deadline.after(linger_s))
            except RingTimeoutError as exc:  # its text only: the record keeps no frame
                logger.warning("%s: closed without aborting message seq %d mid-run: %s",
                               writer_name(), runs.run.seq, str(exc))
        self._control.tell_shutdown()

    def let_remote_readers_receive(self, linger_s: float) -> None:
        """After SHUTDOWN: wait at most ``linger_s`` for the remote readers still there
        to acknowledge every message (queued frames die with this process, as the
        shared context is never terminated); warn of those short of it."""
        remote = self._remote
        seq = self._life.seq
        if remote is None or self._life.state is not WriterState.SHUT:
            return
        short = remote.credit.settle(seq, Deadline.after(linger_s),
                                     self._control.peers.remote_left)
        if short:
            logger.warning(
                "%s: closed after %.1f s with remote readers %s (rank: acknowledged count) "
                "short of all %d messages; frames still queued for them are lost if this "
                "process exits now", writer_name(), linger_s, short, seq,
            )
