"""What the writer is made of, and how it begins and ends.

:class:`WriterBase` builds the writer's parts from checked options (on failure
none is left): the :class:`~.transmitters.LocalTransmitter` and
:class:`~.transmitters.RemoteTransmitter`, the large-object flavor, the control
channel (:class:`~.writer_control.WriterControl`: READY, SHUTDOWN, BROKEN, and the
break for good) and the settling of cut calls (:class:`~.writer_cuts.CutCalls`).
It exports the :class:`~.handle.Handle`, runs the READY handshake and ends the
writer: ``shutdown()`` only sets ``shutting_down`` (vLLM's); ``close()`` (and the
finalizer) first tells the readers -- a run left unfinished is aborted, then
SHUTDOWN(total), the spec's ``WriterShutdown`` -- and then, with remote readers,
waits at most the linger, and only for messages a remote reader still there has
not acknowledged (:meth:`RemoteCredit.settle <.credit.RemoteCredit.settle>`).
What the writer does per message is :class:`~.writer.QueueWriter`'s.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import NoReturn

from ..errors import RingTimeoutError
from ..layout import RingLayout
from ..steps import (
    WRITER_ACTOR,
    WRITER_HANDSHAKE,
)
from ..waiting import Deadline, StallLog, wait_readable
from . import wire
from .flavors import LargeSender
from .flavors.overflow import MarkerSender
from .flavors.run.writer import RunSender
from .handle import Handle, ring_tag
from .lifecycle import WriterLifecycle, WriterState
from .message_queue import MessageQueue
from .peers import Peers
from .serialization import ArenaOptions, Serializer, arena_writer
from .sockets import Signer, new_key, welcome
from .transmitters import LocalTransmitter, RemoteOptions, RemoteTransmitter
from .writer_control import WriterControl, writer_name
from .writer_cuts import CutCalls

logger = logging.getLogger("verifiedring")

_CHUNK = WriterState.CHUNK
_RUN = WriterState.RUN


class WriterBase(MessageQueue):
    """The writer's parts, its handle, its handshake and its end."""

    is_writer = True
    n_reader: int
    n_local_reader: int
    local_reader_ranks: tuple[int, ...]
    remote_window: int
    large_objects: str
    _life: WriterLifecycle

    def _build(
        self, layout: RingLayout, remote: RemoteOptions, arena: ArenaOptions | None, ip: str
    ) -> None:
        """The transmitters, from the checked options (``remote`` is used only with
        remote readers, its linger always), and the parts over them; on failure none
        is left."""
        self._key = new_key()
        self._linger_ms = remote.linger_ms
        self._serializer = Serializer()
        #: The writer's state, reason, next sequence number and what its readers are
        #: owed: every change of them goes through it (checked once watched).
        self._life = WriterLifecycle("call wait_until_ready() before enqueue()")
        if self._observer is not None:
            self._life.watch()
        self._open()
        n_remote = self.n_reader - self.n_local_reader
        self._local: LocalTransmitter | None = None
        self._remote: RemoteTransmitter | None = None
        self._runs: RunSender | None = None
        try:
            if self.n_local_reader:
                self._local = self._local_side(layout, None if n_remote else arena)
            if n_remote:
                self._remote = RemoteTransmitter(self._ctx, ip, remote, self._who())
            self._hold_parts(n_remote)
        except BaseException:
            self._close_transmitters()
            raise
        self._closed = False

    def _hold_parts(self, n_remote: int) -> None:
        """The parts over the transmitters: the large-object flavor, the readers, the
        control channel and the settling of cut calls."""
        self._dumps = self._serializer.dumps  # bound once: the hot path pays no lookups
        local, far = self._local, self._remote
        #: How a message too large for one chunk reaches the local readers (None: no
        #: local reader): the run flavor, else the socket flavor's marker.
        self._large: LargeSender | None = None
        if local is not None:
            self._large = self._runs or MarkerSender(local.publish_chunk)
        peers = Peers(
            self._who(), Signer(self._key), self.local_reader_ranks, n_remote,
            (None if local is None else local.frames.endpoint.socket,
             None if far is None else far.socket),
        )
        #: READY, SHUTDOWN and BROKEN to the readers, and the break for good.
        self._control = WriterControl(
            self._life, local, far, peers, self.local_reader_ranks, self._observer)
        #: The settling of what a cut call left (a run mid-way, a publish's bookkeeping).
        self._cuts = CutCalls(self._life, local, far, self._runs, self._control)

    def _local_side(self, layout: RingLayout, arena: ArenaOptions | None) -> LocalTransmitter:
        local = LocalTransmitter(self._ctx, layout, self._observer, self._who())
        try:
            local.cursor.log_interval = self.log_interval
            if self.large_objects == "stream":
                spill = self.n_reader == self.n_local_reader  # no remote reader needs it whole
                self._runs = RunSender(
                    local.cursor, self._observer, writer_name, layout.fits, spill
                )
            if arena is not None:
                local.arena = arena_writer(self.n_local_reader, arena, self._life)
                self._serializer = Serializer(arena=local.arena)
        except BaseException:
            local.close(0)
            raise
        return local

    @property
    def log_interval(self) -> float:
        """Seconds between two warnings while a wait lasts (the ring's wait too)."""
        return self._log_interval_s

    @log_interval.setter
    def log_interval(self, seconds: float) -> None:
        self._log_interval_s = seconds
        local = getattr(self, "_local", None)  # not made yet while _open runs
        if local is not None:
            local.cursor.log_interval = seconds

    @property
    def rejected_frames(self) -> int:
        """Malformed acknowledgements dropped unread."""
        return 0 if self._remote is None else self._remote.credit.rejected

    def _who(self) -> str:
        return writer_name()

    def _watch(self) -> None:
        """While the writer waits: a reader that left breaks it for good."""
        self._control.watch()

    def _refuse(self) -> NoReturn:
        self._control.refuse()

    def export_handle(self) -> Handle:
        if self._closed:
            self._refuse()
        local, remote = self._local, self._remote
        ring = None if local is None else local.ring.handle()
        arena = None if local is None or local.arena is None else local.arena.handle
        return Handle(
            n_reader=self.n_reader,
            local_reader_ranks=list(self.local_reader_ranks),
            buffer_handle=ring,
            local_subscribe_addr=None if local is None else local.frames.endpoint.address,
            remote_subscribe_addr=None if remote is None else remote.address,
            remote_ack_addr=None if remote is None else remote.ack_address,
            remote_window=self.remote_window,
            hmac_key=self._key,
            ring_tag=ring_tag(Signer(self._key), ring, arena),
            curve=None if remote is None else remote.keys.reader,
            writer_pid=os.getpid(),
            writer_host=socket.gethostname(),
            tensor_arena_handle=arena,
            remote_addr_ipv6=remote is not None and remote.address.startswith("tcp://["),
        )

    # --- the handshake -------------------------------------------------------

    def _handshake(self, deadline: Deadline) -> None:
        """Wait for every reader to subscribe, then send READY."""
        # spec: WriterHandshake -- every subscription first (essential), then READY
        peers = self._control.peers
        if not peers.complete():

            def timed_out(waited: float) -> RingTimeoutError:
                return RingTimeoutError(f"{peers.describe()}; timed out after {waited:.3f} s")

            log = StallLog(peers.describe, self.log_interval)
            wait_readable(peers.gather, deadline, log, timed_out)
        obs = self._observer
        if obs is not None:
            obs.begin(WRITER_ACTOR)
        self._control.send_control([wire.control_header(wire.READY, 0)], "READY")
        for xpub in peers.sockets():
            welcome(xpub, wire.late_frame())  # a later subscriber is told it is late
        if obs is not None:
            obs.end(WRITER_ACTOR, WRITER_HANDSHAKE, -1)
        if self._local is not None:
            self._local.after_handshake([peers.stall_name(r) for r in self.local_reader_ranks])
        if self._remote is not None:
            self._remote.credit.start(set(peers.remote))
            self._remote.close_door()  # a later reader is refused at connect, writer idle or not
        self._life.ready()

    def _close_transmitters(self) -> None:
        """Close the sockets (queued frames: at most the linger) and the segment."""
        if self._remote is not None:
            self._remote.close(self._linger_ms)
        if self._local is not None:
            self._local.close(self._linger_ms)

    # --- the end ------------------------------------------------------------------------

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
        state = self._life.state
        if state is not _CHUNK and state is not _RUN:
            return  # before the handshake, told already or broken: nothing to tell
        runs = self._runs
        if runs is not None and runs.active:
            try:
                self._cuts.abort_run(runs.run, "the writer closed mid-message",
                                     Deadline.after(self._linger_ms / 1000))
            except RingTimeoutError as exc:
                logger.warning("%s: closed without aborting message seq %d mid-run: %s",
                               self._who(), runs.run.seq, exc)
        self._control.tell_shutdown()

    def _before_close(self) -> None:
        """SHUTDOWN, then let the remote readers receive everything (at most the linger):
        queued frames die with this process, as the shared context is never terminated."""
        self._tell_readers()
        remote = self._remote
        seq = self._life.seq
        if remote is None or self._life.state is not WriterState.SHUT:
            return
        deadline = Deadline.after(self._linger_ms / 1000)
        short = remote.credit.settle(seq, deadline, self._control.peers.remote_left)
        if short:
            logger.warning(
                "%s: closed after %.1f s with remote readers %s (rank: acknowledged count) "
                "short of all %d messages; frames still queued for them are lost if this "
                "process exits now", self._who(), self._linger_ms / 1000, short, seq,
            )

    def _release(self) -> None:
        # close() cut before its SHUTDOWN (or a BROKEN) went out: sent now, before the
        # sockets close, so the readers learn the end, not only that the writer is gone
        self._control.tell_owed()
        self._close_transmitters()
