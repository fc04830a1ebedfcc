"""The writer's end: a run's abort, a publish interrupted after its store, vLLM's
``shutdown()`` flag, and ``close()``'s steps.

``shutdown()`` only sets ``shutting_down`` (vLLM's): the writer goes on sending.
``close()`` (and the finalizer) first tells the readers -- a run left unfinished is
aborted, then SHUTDOWN(total) (the spec's ``WriterShutdown``) -- and then, with remote
readers, waits at most the linger, and only for messages a remote reader still there
has not acknowledged (:meth:`RemoteCredit.settle <.credit.RemoteCredit.settle>`).
"""

from __future__ import annotations

import enum
import logging

from ..errors import RingTimeoutError
from ..steps import WRITER_ACTOR, WRITER_SHUTDOWN
from ..waiting import Deadline
from . import wire
from .flavors.run.writer import RunWriter
from .lifecycle import WriterState
from .transmitters import LocalTransmitter, RemoteTransmitter
from .writer_base import WriterBase

logger = logging.getLogger("verifiedring")

_CHUNK = WriterState.CHUNK
_RUN = WriterState.RUN


class WriterEnd(WriterBase):
    """How a writer ends a run mid-way, a publish cut short, and itself."""

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
                self._break_interrupted(None, f"publishing message seq {seq}",
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
                    self._break_interrupted(exc, f"aborting message seq {seq}",
                                            "its ABORT was published")
                    life.seq = seq + 1
                else:
                    life.finish(seq + 1)
            raise
        remote = self._remote
        if remote is not None:
            life.enter(WriterState.REMOTE_ABORT)
            try:
                self._send(
                    remote.send, wire.abort_frame(seq, reason), f"abort frame seq {seq}", seq
                )
            except BaseException as exc:  # also KeyboardInterrupt: seq {seq} is out
                self._break_interrupted(
                    exc, f"sending the abort frame of message seq {seq}", "its ABORT was published"
                )
                raise
        life.finish(seq + 1)

    def _settle(self, timeout: float | None) -> Deadline:
        """The deadline of a call made while not at CHUNK: a run left mid-way is
        aborted first (a timeout leaves the abort due); one whose end is out but
        whose call was cut before it counted the sequence number is over
        (:meth:`abort_run`); any other state refuses."""
        runs, life = self._runs, self._life
        if life.state is WriterState.REMOTE_ABORT:  # its ABORT frame went, its end was cut
            life.finish(life.seq + 1)
            return Deadline.after(timeout)
        if life.state is not _RUN or runs is None:
            self._refuse()
        deadline = Deadline.after(timeout)
        if runs.active or runs.run.ended == life.seq:  # due; or over, its end uncounted
            try:
                self.abort_run(runs.run, "the writer was interrupted mid-message", deadline)
            except RingTimeoutError as exc:  # still due: the next call tries again
                if self._local is not None:
                    raise self._ring_stalled(self._local, runs.run.seq, exc) from None
                raise
        if self._life.state is WriterState.BROKEN:  # the abort found its frame unsent
            self._refuse()
        self._life.enter(_CHUNK)
        return deadline

    def _local_path_raised(
        self, exc: BaseException, seq: int, local: LocalTransmitter,
        remote: RemoteTransmitter | None,
    ) -> None:
        """Message ``seq``'s local path (one chunk or a run) raised: mid-run, the run's ABORT is
        due; after its publish store (a run's: its LAST's), ``seq`` is used up."""
        runs = self._runs
        if runs is not None and runs.active:
            self._life.enter(_RUN)
        elif local.published[0] == seq:
            self._published_then_interrupted(exc, seq, local.published[1], remote)
        elif runs is not None and runs.run.ended == seq:  # a run's LAST, its frame due
            self._published_then_interrupted(exc, seq, True, remote)

    def _settle_commit(self, local: LocalTransmitter) -> None:
        """A call's publish of message ``seq`` = the next one was begun and its
        bookkeeping never finished (an interrupt, and another in its handling): if its
        chunk is still held, the claim lets it go; if its publish store happened, the
        message is out (:meth:`_published_then_interrupted`)."""
        seq, inline, i = local.committing
        cursor = local.cursor
        if not cursor.holding and cursor.settle(i):
            local.published = (seq, inline)
            self._published_then_interrupted(None, seq, inline, self._remote)

    def _published_then_interrupted(
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
            self._break_interrupted(exc, f"publishing message seq {seq}", "its publish store")
        self._life.seq = seq + 1  # plain: no call between the break (if any) and it

    # --- the end ------------------------------------------------------------------------
    @property
    def state(self) -> WriterState:
        """The writer's state (the spec's ``wpc``)."""
        return self._life.state

    def _stop(self, state: enum.Enum, why: str) -> None:
        assert isinstance(state, WriterState)
        self._life.enter(state, why)

    def __repr__(self) -> str:
        life = vars(self).get("_life")
        if life is None:
            return f"<{type(self).__name__} unopened>"
        return f"<{type(self).__name__} {self._who()} seq {life.seq} {life.state.value}>"

    def shutdown(self) -> None:
        """vLLM's: set :attr:`shutting_down`, at any time (idempotent). Nothing is sent
        and nothing refused: an ``enqueue`` in progress on another thread completes and
        a later one is sent. The writer has no cancellable wait to wake (neither has
        vLLM's). Readers learn that no more messages follow from :meth:`close`."""
        self.shutting_down = True

    def _tell_readers(self) -> None:
        """SHUTDOWN(total) on both sockets, after the last message (a run left
        unfinished is aborted first); nothing once the writer is broken or was never
        ready. Afterwards every call refuses (:class:`ClosedError`)."""
        life = self._life
        state = life.state
        if state is not _CHUNK and state is not _RUN:
            return  # before the handshake, told already or broken: nothing to tell
        runs = self._runs
        if runs is not None and runs.active:
            try:
                self.abort_run(runs.run, "the writer closed mid-message",
                               Deadline.after(self._linger_ms / 1000))
            except RingTimeoutError as exc:
                logger.warning("%s: closed without aborting message seq %d mid-run: %s",
                               self._who(), runs.run.seq, exc)
        life.enter(WriterState.SHUT, f"the queue was shut down after {life.seq} messages")
        obs = self._observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        # spec: WriterShutdown -- SHUTDOWN(total) on both sockets, after the last message
        self._send_control([wire.control_header(wire.SHUTDOWN, life.seq)], "SHUTDOWN")
        life.shutdown_owed = False
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_SHUTDOWN, life.seq)
        self._end_local_readers(self._local is not None)

    def _before_close(self) -> None:
        """SHUTDOWN, then let the remote readers receive everything (at most the linger):
        queued frames die with this process, as the shared context is never terminated."""
        self._tell_readers()
        remote = self._remote
        seq = self._life.seq
        if remote is None or self._life.state is not WriterState.SHUT:
            return
        deadline = Deadline.after(self._linger_ms / 1000)
        short = remote.credit.settle(seq, deadline, self._peers.remote_left)
        if short:
            logger.warning(
                "%s: closed after %.1f s with remote readers %s (rank: acknowledged count) "
                "short of all %d messages; frames still queued for them are lost if this "
                "process exits now", self._who(), self._linger_ms / 1000, short, seq,
            )

    def _release(self) -> None:
        # close() cut before its SHUTDOWN (or a BROKEN) went out: sent now, before the
        # sockets close, so the readers learn the end, not only that the writer is gone
        life = self._life
        if life.broken_owed is not None:
            self._tell_broken()
        elif life.shutdown_owed:
            life.shutdown_owed = False
            self._send_owed([wire.control_header(wire.SHUTDOWN, life.seq)], "SHUTDOWN")
        if self._remote is not None:
            self._remote.close(self._linger_ms)
        if self._local is not None:
            self._local.close(self._linger_ms)
