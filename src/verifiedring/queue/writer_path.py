"""The writer's per-message path: ``enqueue`` and ``acquire_write``, one sequence.

``enqueue`` is: serialize, reserve the remote readers' credit, the local path
(:meth:`LocalTransmitter.publish <.transmitters.LocalTransmitter.publish>`:
inline, or by the large-object flavor, a :class:`~.flavors.LargeSender`: an
overflow marker or a run), then the frames (the marker's on the local socket,
every message's on the remote one). The state (:class:`WriterState`,
the spec's ``wpc``) says which of those steps a call left unfinished.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from typing import Any

from ..errors import RingTimeoutError
from ..steps import (
    WRITER_ACTOR,
    WRITER_PUBLISH_CHUNK,
    QueueObserver,
)
from ..waiting import FOREVER, Deadline
from . import wire
from .flavors import LargeSender
from .flavors.overflow import MarkerSender
from .flavors.run.writer import RunSender, unbound_abort
from .lifecycle import WriterLifecycle, WriterState
from .message_queue import busy
from .serialization import Serializer
from .transmitters import LocalTransmitter, RemoteTransmitter
from .writer_control import WriterControl, writer_name
from .writer_cuts import CutCalls

_CHUNK = WriterState.CHUNK
_RUN = WriterState.RUN
_after = Deadline.after  # bound once: no bound method made per call


class WriterPath:
    """The writer's per-message path, over the parts it shares with the writer end:
    its lifecycle, transmitters, large-object flavor, control channel and the
    settling of cut calls."""

    def __init__(  # noqa: PLR0913 -- the end's parts it shares, each named
        self, life: WriterLifecycle, local: LocalTransmitter | None,
        remote: RemoteTransmitter | None, runs: RunSender | None, serializer: Serializer,
        control: WriterControl, cuts: CutCalls, observer: QueueObserver | None,
        max_chunk_bytes: int, log_interval: float,
    ) -> None:
        self._life = life
        self._local = local
        self._remote = remote
        self._runs = runs
        self._serializer = serializer
        self._dumps = serializer.dumps  # bound once: the hot path pays no lookups
        #: How a message too large for one chunk reaches the local readers (None: no
        #: local reader): the run flavor, else the socket flavor's marker.
        self._large: LargeSender | None = None
        if local is not None:
            self._large = runs or MarkerSender(local.publish_chunk)
        self._control = control
        #: The settling of what a cut call left (a run mid-way, a publish's bookkeeping).
        self.cuts = cuts
        self._observer = observer
        self.max_chunk_bytes = max_chunk_bytes
        #: While the writer waits: a reader that left breaks it for good.
        self._watch: Callable[[], None] = control.watch
        #: Seconds between two stall lines of a wait for credit (the end's setter).
        self.log_interval = log_interval
        # Invariant: a thread is inside enqueue or acquire_write.
        self._busy = False

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        """The writer's enqueue (:meth:`.QueueWriter.enqueue`)."""
        if self._busy:
            raise busy(writer_name(), "enqueue()")
        self._busy = True
        runs = self._runs
        if runs is not None:  # a run this call cannot finish is aborted by the writer
            runs.abort = self.cuts.abort_run  # this call's (cleared as it ends: no cycle)
        try:
            # at CHUNK, the hot path (untimed: no call); else a due abort first, or a refusal
            life = self._life
            local = self._local
            if local is not None and local.committing[0] == life.seq:
                self.cuts.settle_commit(local)  # the last call's publish, cut and unsettled
            if life.state is not _CHUNK:
                deadline = self.cuts.settle(timeout)
            elif timeout is None:
                deadline = FOREVER
            else:
                deadline = _after(timeout)
            seq = life.seq
            if runs is None or not runs.spill:
                p = self._dumps(obj)
            else:  # the run flavor pickles straight into the ring (no remote reader)
                streamed = self._stream(runs, obj, seq, deadline)
                if streamed is None:
                    return
                p = streamed
            self._publish(obj, seq, p, deadline)
        finally:
            self._busy = False
            if runs is not None:
                runs.abort = unbound_abort

    def _publish(self, obj: Any, seq: int, p: wire.Pickled, deadline: Deadline) -> None:
        """Message ``seq`` (``p``): credit, the local path, then the frames."""
        remote = self._remote
        if remote is not None and remote.credit.needs_check(seq):
            # WriterSendRemoteFrame's guard (credit), checked before anything is published
            remote.credit.reserve(seq, deadline, writer_name(), self.log_interval, self._watch)
        local, large = self._local, self._large
        overflow = False
        if local is None or large is None:
            obs = self._observer
            if obs is not None:  # no local reader: the spec's publish touches no ring
                obs.begin(WRITER_ACTOR)
                obs.end(WRITER_ACTOR, WRITER_PUBLISH_CHUNK, seq, obj, "inline")
        else:
            try:
                overflow = local.publish(seq, p, deadline, self._watch, obj, large)
            except RingTimeoutError as exc:
                raise self._control.ring_stalled(local, seq, exc) from None
            except BaseException as exc:
                self.cuts.local_path_raised(exc, seq, local, remote)
                raise
        if overflow or remote is not None:
            try:  # from the call on: its frame_parts, its first line (an interrupt there)
                self._send_frames(seq, wire.frame_parts(seq, p), overflow, remote)
            except BaseException as exc:  # also KeyboardInterrupt: seq {seq} is out
                self._control.break_interrupted(
                    exc, f"sending message seq {seq}", "it was published")
                raise
        self._life.seq = seq + 1  # plain: no call between the publish and it

    def _stream(
        self, runs: RunSender, obj: Any, seq: int, deadline: Deadline
    ) -> wire.Pickled | None:
        """``obj`` pickled into the ring (no remote reader), in state RUN: a large one
        as a run (``None``: sent), else what fits one chunk; back to CHUNK unless a run
        is left unfinished."""
        life = self._life
        life.enter(_RUN)
        try:
            try:
                p = runs.dump(self._serializer, obj, seq, deadline, self._watch)
            except RingTimeoutError as exc:
                local = self._local
                if local is None or runs.active:
                    raise
                raise self._control.ring_stalled(local, seq, exc) from None
            except BaseException as exc:
                if runs.run.ended == seq:  # interrupted after its LAST's store: it is sent
                    self.cuts.published_then_interrupted(exc, seq, True, None)
                raise
            if p is None:
                life.seq = seq + 1  # plain: no call between the run's LAST and it
            return p
        finally:
            if life.state is _RUN and not runs.active:
                life.enter(_CHUNK)

    def _send_frames(
        self, seq: int, parts: list[Any], overflow: bool, remote: RemoteTransmitter | None
    ) -> None:
        """Message ``seq``'s frames, after its chunk: the marker's on the local socket,
        then the remote one. Interrupted, the writer is broken (the caller's)."""
        local, life = self._local, self._life
        if overflow and local is not None:
            life.enter(WriterState.LOCAL)
            self._control.send(local.frames.send, parts, f"overflow frame seq {seq}", seq)
        if remote is not None:
            life.enter(WriterState.REMOTE)
            self._control.send(remote.send, parts, f"remote frame seq {seq}", seq)
        life.enter(_CHUNK)

    @contextlib.contextmanager
    def acquire_write(self, timeout: float | None = None) -> Iterator[memoryview]:
        """The writer's buffer API (:meth:`.QueueWriter.acquire_write`)."""
        if self._busy:
            raise busy(writer_name(), "acquire_write()")
        self._busy = True
        try:
            life = self._life
            local = self._local
            if local is not None and local.committing[0] == life.seq:
                self.cuts.settle_commit(local)  # the last call's publish, cut and unsettled
            deadline = _after(timeout) if life.state is _CHUNK else self.cuts.settle(timeout)
            seq = life.seq
            remote = self._remote
            if remote is not None and remote.credit.needs_check(seq):
                remote.credit.reserve(seq, deadline, writer_name(), self.log_interval, self._watch)
            if local is None:
                scratch = bytearray(self.max_chunk_bytes - wire.HEADER_BYTES)
                with memoryview(scratch) as buf:
                    yield buf
                data = bytes(scratch)
                obs = self._observer
                if obs is not None:  # no local reader: the spec's publish touches no ring
                    obs.begin(WRITER_ACTOR)
                    obs.end(WRITER_ACTOR, WRITER_PUBLISH_CHUNK, seq, data, "inline")
            else:
                data = yield from self._in_place(local, seq, deadline, remote is not None)
            if remote is not None:
                try:
                    self._send_frames(seq, wire.frame_parts(seq, self._dumps(data)), False, remote)
                except BaseException as exc:  # also KeyboardInterrupt: seq {seq} is out
                    self._control.break_interrupted(
                        exc, f"sending message seq {seq}", "it was published")
                    raise
            life.seq = seq + 1  # plain: no call between the publish and it
        finally:
            self._busy = False

    def _in_place(
        self, local: LocalTransmitter, seq: int, deadline: Deadline, copy: bool
    ) -> Generator[memoryview, None, bytes]:
        """acquire_write's ring chunk: claimed, its payload yielded, published (or, the
        body raising, let go); its bytes when ``copy`` (for the remote frame)."""
        try:
            chunk = local.claim(deadline, self._watch)
        except RingTimeoutError as exc:
            raise self._control.ring_stalled(local, seq, exc) from None
        try:
            with chunk[wire.HEADER_BYTES :] as buf:
                yield buf
            obs = self._observer
            data = bytes(chunk[wire.HEADER_BYTES :]) if copy or obs is not None else b""
        except BaseException:
            local.let_go()  # the spec's WriterAbort: nothing published, seq unused
            raise
        try:
            local.commit(chunk, seq, None, True, data)
        except BaseException as exc:
            if local.published[0] == seq:
                self.cuts.published_then_interrupted(exc, seq, True, self._remote)
            raise
        return data
