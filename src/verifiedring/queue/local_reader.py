"""A local reader end: messages from the ring, overflow frames from the ipc socket.

State: ``seq`` (the next sequence number expected) and ``pending`` (the
sequence number of an overflow marker already taken from the ring whose frame
has not been received yet, else ``None``). A dequeue:

1. ``pending is None``: wait for the ring chunk; check its ``seq``; INLINE:
   consume it (``seq += 1``), load the object, release; OVERFLOW: set
   ``pending = seq`` and release the chunk (the writer is never held up by
   a socket wait).
2. ``pending is not None``: take the frame (stashed while waiting on the
   ring, or received now); its sequence number must equal ``pending``;
   ``pending = None``, ``seq += 1``, load it.

A timeout in step 2 raises :class:`RingTimeoutError` and leaves ``pending``
set: the retry goes straight to step 2 and returns that same object. While
it waits on the ring, the reader looks at its socket every ``SLICE`` seconds:
frames that arrive are stashed in order, and SHUTDOWN is noted.
"""

from __future__ import annotations

import hmac
import os
import time
import weakref
from collections import deque
from typing import Any

import zmq

from ..arena import ArenaReader
from ..errors import (
    BrokenPeerError,
    ClosedError,
    DecodeError,
    MessageAbortedError,
    MisuseError,
    RingTimeoutError,
)
from ..leftovers import alive
from ..ring import ReaderCursor, ShmRingBuffer
from ..shm import SHM_DIR
from ..steps import (
    READER_RECV_FRAME,
    READER_RESUME,
    READER_SEE_SHUTDOWN,
    READER_STASH,
    READER_TAKE_CHUNK,
    READER_TIMEOUT,
    QueueObserver,
)
from ..waiting import FOREVER, Deadline, StallLog, wait_for
from . import wire
from .handle import Handle, ring_tag
from .reader import Cancel, QueueReader
from .run import RunReader
from .sockets import pending_frames

_read_header = wire.HEADER.unpack_from  # bound once: the hot path pays no lookups
_load_inline = wire.load_inline
#: The observer's name of what ReaderTakeChunk took.
_KIND_NAMES = {
    wire.INLINE: "inline", wire.INLINE_LENT: "inline", wire.OVERFLOW: "overflow",
    wire.RUN_FIRST: "first",
}

#: How often a local reader blocked on the ring looks at its socket.
SLICE = 0.2


class LocalReader(QueueReader):
    """A reader on the writer's host: ``create_from_handle`` with a local rank."""

    is_local_reader = True
    channel = "local"

    def __init__(self, handle: Handle, rank: int, observer: QueueObserver | None = None) -> None:
        super().__init__(handle, rank, observer)
        bh = handle.buffer_handle
        if bh is None or handle.local_subscribe_addr is None:
            raise MisuseError(f"handle lists local rank {rank} but carries no ring")
        self.max_chunk_bytes = bh.max_chunk_bytes
        self.max_chunks = bh.max_chunks
        self._pending: int | None = None
        self._stash: deque[list[zmq.Frame]] = deque()
        self._socket_check_at = 0.0
        if not hmac.compare_digest(ring_tag(self._signer, bh, handle.arena), handle.ring_tag):
            raise BrokenPeerError(
                f"{self._who()}: the handle's ring (segment {bh.name!r}, n_reader="
                f"{bh.n_reader}, max_chunk_bytes={bh.max_chunk_bytes}, max_chunks="
                f"{bh.max_chunks}, arena {handle.arena}) is not the geometry the writer "
                "created: handle altered"
            )
        expected = bh.layout.total_bytes
        try:
            actual: int | None = os.stat(os.path.join(SHM_DIR, bh.name)).st_size
        except FileNotFoundError:
            actual = None  # attach reports a missing segment
        if actual is not None and actual != expected:
            raise BrokenPeerError(
                f"segment {bh.name!r} has {actual} bytes but the handle's geometry "
                f"(n_reader={bh.n_reader}, max_chunk_bytes={bh.max_chunk_bytes}, "
                f"max_chunks={bh.max_chunks}) needs {expected}: handle and segment do not match"
            )
        self._ring = ShmRingBuffer.attach(bh)
        sock: zmq.Socket[Any] | None = None
        try:
            self._cursor: ReaderCursor = self._ring.reader(self.local_reader_ranks.index(rank))
            self._sock = sock = self._subscribe(
                handle.local_subscribe_addr, bh.max_chunks + 1, None
            )
            self._arena = None if handle.arena is None else ArenaReader(
                handle.arena, self.local_reader_ranks.index(rank)
            )
            self._run = RunReader(self._cursor, weakref.proxy(self), observer, self._actor)
            #: (seq, why) of a run this reader's dequeue left mid-way (an interrupt, a
            #: cancel): the next dequeue skips the rest and raises DecodeError for it.
            self._interrupted: tuple[int, str] | None = None
        except BaseException:
            if sock is not None:
                sock.close(linger=0)
            self._ring.close()
            raise
        self._closed = False

    def _socket(self) -> zmq.Socket[Any]:
        return self._sock

    def dequeue(
        self, timeout: float | None = None, *, cancel: Cancel | None = None,
        indefinite: bool = False,
    ) -> Any:
        """The next object, in the writer's order. Raises :class:`RingTimeoutError`
        after ``timeout`` seconds (retrying is safe), :class:`ClosedError` after
        shutdown, :class:`DecodeError` (message consumed) if it does not unpickle,
        :class:`CancelledError` when woken by :meth:`shutdown` or ``cancel``.
        ``indefinite=True`` (a worker's busy loop): no stall warnings."""
        if self._refusal is not None or self.shutting_down:
            self._not_now()
        self._cancel = cancel  # consulted only while it waits (as vLLM's)
        self._quiet = indefinite
        deadline = FOREVER if timeout is None else Deadline.after(timeout)
        if self._interrupted is not None:
            self._finish_interrupted_run()
        if self._arena is not None:
            self._arena.begin(self._seq)
        obs = self._observer
        if self._pending is None:
            cursor = self._cursor
            if not cursor.poll():
                if timeout == 0:
                    self._socket_check_at = 0.0  # a poll drains the socket (SHUTDOWN) each call
                if not self._ring_or_shutdown():
                    wait_for(
                        self._ring_or_shutdown, deadline, self._ring_stall, self._ring_timeout,
                        sleeper=cursor.sleeper,
                    )
            if obs is not None:
                obs.begin(self._actor)
            seq = kind = -1
            got: Any = None  # what the step delivered, for the observer
            run = self._run
            try:
                # spec: ReaderTakeChunk -- released on leaving, also on a raise; a run's
                # FIRST chunk is held on by the run (ReaderReleaseRunChunk releases it)
                chunk = cursor.__enter__()
                try:
                    header = _read_header(chunk)
                    kind, seq = header[0], header[1]
                    if seq != self._seq or kind not in wire.CHUNK_KINDS:
                        raise self._out_of_order("ring", kind, seq)
                    if kind == wire.RUN_FIRST:
                        self._seq = seq + 1  # consumed before it is decoded
                        run.begin(seq, chunk, header[2])
                    elif kind != wire.OVERFLOW:
                        self._seq = seq + 1  # consumed before it is decoded
                        try:
                            got = _load_inline(chunk, header)
                        except DecodeError as exc:
                            got = self._named(exc)
                            raise got from exc.cause
                        return got
                    else:
                        self._pending = seq  # the chunk is released now; the frame is awaited
                finally:
                    if not run.active:
                        cursor.__exit__(None, None, None)
            finally:
                if obs is not None:
                    obs.end(self._actor, READER_TAKE_CHUNK, seq, got, _KIND_NAMES.get(kind, ""))
            if run.active:
                return self._load_run(run)
            return self._take_frame(seq, deadline)  # the marker's
        if obs is not None:
            # spec: ReaderResume -- a dequeue after a timeout goes back to the pending frame
            obs.begin(self._actor)
            obs.end(self._actor, READER_RESUME, self._pending)
        return self._take_frame(self._pending, deadline)

    def _load_run(self, run: RunReader) -> Any:
        """The object of the run whose FIRST chunk was just taken: unpickled straight
        out of its chunks, each released once consumed. A broken run (a chunk out of
        place) breaks this reader for good. Left mid-way (an interrupt, a cancel), the
        message is not lost unseen: the next dequeue raises DecodeError for it."""
        try:
            return self._unpickle_run(run)
        except MessageAbortedError as exc:
            raise self._named(exc) from None
        except BrokenPeerError as exc:
            self._refusal = (BrokenPeerError, f"broken since message seq {run.seq}'s run: {exc}")
            raise
        except BaseException as exc:
            if run.active:
                self._interrupted = (run.seq, f"{type(exc).__name__}: {exc}".rstrip(": "))
            raise

    def _finish_interrupted_run(self) -> None:
        """Skip the rest of the run a dequeue left mid-way, then raise DecodeError for
        its message (consumed: the next dequeue returns the next message)."""
        interrupted = self._interrupted
        assert interrupted is not None
        seq, why = interrupted
        run = self._run
        cause: BaseException = RuntimeError(
            f"the dequeue reading it was interrupted mid-run ({why}); the rest of its run "
            "was skipped"
        )
        try:
            if run.active:
                run.skip_rest(self._named(DecodeError(seq, cause)))
        except MessageAbortedError as exc:  # the writer aborted it meanwhile
            cause = exc.cause
        except BrokenPeerError as exc:
            self._refusal = (BrokenPeerError, f"broken since message seq {seq}'s run: {exc}")
            raise
        self._interrupted = None
        raise self._named(DecodeError(seq, cause))

    # --- what the run asks (RunOwner) ---------------------------------------------

    def who(self) -> str:
        return self._who()

    def log_every(self) -> float:
        return self._log_interval()

    def watch_run(self) -> None:
        """While a run waits for its next chunk: woken, the writer gone, or SHUTDOWN
        before the run's end (the writer could not abort it) raise."""
        self._watch()
        now = time.monotonic()
        if now >= self._socket_check_at:
            self._socket_check_at = now + SLICE
            self._drain_socket()
        total = self._shutdown_total
        if total is not None and total <= self._run.seq:
            why = (
                f"the writer shut the queue down after {total} messages, in the middle of "
                f"message seq {self._run.seq}'s run (part {self._run.part} read)"
            )
            self._refusal = (ClosedError, why)
            raise ClosedError(f"{self._who()}: {why}")

    def _unpickle_run(self, run: RunReader) -> Any:
        seq = run.seq
        try:
            got = run.load()
        except (BrokenPeerError, ClosedError):  # ClosedError: woken (CancelledError)
            raise
        except DecodeError:  # MessageAbortedError: the writer aborted the run
            raise
        except Exception as exc:
            # the run goes on to its LAST (or ABORT) first: the next dequeue starts after it
            err = self._named(DecodeError(seq, exc, None))
            run.skip_rest(err)
            raise err from exc
        if not run.at_end:
            err = self._named(DecodeError(
                seq, ValueError("the run has bytes after the end of its pickle stream")
            ))
            run.skip_rest(err)
            raise err
        run.skip_rest(got)  # its LAST: released, the object delivered
        return got

    def _take_frame(self, pending: int, deadline: Deadline) -> Any:
        obs = self._observer
        # spec: ReaderRecvFrame -- the stash first, in arrival order
        if self._stash:
            frames = self._stash.popleft()
        else:
            try:
                frames = self._recv(
                    self._sock, deadline,
                    f"overflow frame seq {pending} on the local socket (its chunk is released)",
                )
            except RingTimeoutError:
                # spec: ReaderTimeout -- _pending stays set, so the retry returns this
                # same object (the known trap cannot happen)
                if obs is not None:
                    obs.begin(self._actor)
                    obs.end(self._actor, READER_TIMEOUT, pending)
                raise
        if obs is not None:
            obs.begin(self._actor)
        seq = -1
        got: Any = None
        try:
            kind, seq = self._parse_header(frames[0])[:2]
            if kind != wire.OVERFLOW or seq != pending:
                raise self._out_of_order("local socket", kind, seq)
            self._pending = None
            self._seq = seq + 1  # consumed before it is decoded
            try:
                got = self._load_frame(seq, frames)
            except DecodeError as exc:
                got = exc
                raise
            return got
        finally:
            if obs is not None:
                obs.end(self._actor, READER_RECV_FRAME, seq, got)

    def _ring_or_shutdown(self) -> bool:
        """The ring's next chunk is ready; every ``SLICE`` also drain the socket
        (stash frames, note SHUTDOWN: raises :class:`ClosedError` once all is read)."""
        if self._cursor.poll():
            return True
        now = time.monotonic()
        if now >= self._socket_check_at:
            self._socket_check_at = now + SLICE
            self._drain_socket()
            if self._shutdown_total is not None:
                self._saw_shutdown(self._shutdown_total)
            self._watch()  # after SHUTDOWN: a writer that shut down and exited is not broken
        return False

    def _drain_socket(self) -> None:
        """Take every frame waiting on the socket: stash message frames in order, note
        SHUTDOWN's total."""
        sock = self._sock
        while (frames := pending_frames(sock)) is not None:
            kind, seq = self._parse_header(frames[0])[:2]
            obs = self._observer
            if obs is not None:
                obs.begin(self._actor)
            if kind == wire.SHUTDOWN:
                # spec: ReaderSeeShutdown
                self._shutdown_total = seq
                if obs is not None:
                    obs.end(self._actor, READER_SEE_SHUTDOWN, seq)
            else:
                # spec: ReaderStash -- the frame of a marker published since the last look
                self._stash.append(frames)
                if obs is not None:
                    obs.end(self._actor, READER_STASH, seq)

    def _writer_lost(self) -> str | None:
        if self._writer_pid and not alive(self._writer_pid):
            return "its process has exited"
        return None

    def _ring_stall(self) -> StallLog:
        return StallLog(self._describe_ring_wait, self._log_interval())

    def _describe_ring_wait(self) -> str:
        c = self._cursor
        return (
            f"{self._who()} waits for message seq {self._seq} in chunk {c.index} "
            f"({c.flag_state()})"
        )

    def _ring_timeout(self, waited: float) -> RingTimeoutError:
        c = self._cursor
        return RingTimeoutError(
            f"{self._who()} timed out after {waited:.3f} s waiting for message seq {self._seq} "
            f"in ring chunk {c.index} ({c.flag_state()})"
        )

    def _release(self) -> None:
        self._run.close()
        self._stash.clear()
        self._sock.close(linger=0)
        self._ring.close()
        if self._arena is not None:
            self._arena.close()
