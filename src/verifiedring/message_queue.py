"""MessageQueue: broadcast Python objects from one writer to many readers.

A drop-in for vLLM's ``MessageQueue`` (``shm_broadcast.py``), built on
:class:`~verifiedring.ring.ShmRingBuffer` and ZeroMQ (:mod:`.transport`).

Channels
--------
* **Local readers** (same host, ranks in ``local_reader_ranks``) read every
  message from the ring. An object whose serialized form fits in a chunk is
  stored there whole (``INLINE``, or ``INLINE_LENT`` for a large top-level
  ``bytes``/``bytearray``, which the reader copies out exactly once); a larger
  one leaves only an overflow marker
  (``FRAMED`` + its sequence number) in the ring and travels as a multipart
  frame with the same sequence number on the local ipc XPUB.
* **Remote readers** (every other rank) never touch the ring: they receive
  every object as an HMAC-authenticated frame on the remote TCP XPUB, and send
  cumulative acknowledgements to the writer's PULL socket.

Every message carries the writer's sequence number (0, 1, 2, ...); a reader
checks that it receives exactly the next one, whichever channel it took, and
raises :class:`BrokenPeerError` on a gap instead of returning a wrong object.

Overflow marker vs. payload (the known trap)
--------------------------------------------
Reader state: ``seq`` (next sequence number expected) and ``pending`` (the
sequence number of an overflow marker already taken from the ring, whose frame
has not been received yet, else ``None``). A dequeue:

1. ``pending is None``: acquire the ring slot; check its ``seq``; INLINE:
   load the object, release, ``seq += 1``, return it. FRAMED: set
   ``pending = seq`` and release the slot (so the writer is never held up by
   a socket wait).
2. ``pending is not None``: wait for the local frame; its sequence number
   must equal ``pending``; load it, ``pending = None``, ``seq += 1``, return.

A timeout in step 2 raises :class:`RingTimeoutError` and leaves ``pending``
set: the retry goes straight to step 2 and returns that same object. A
released slot's payload can therefore never be lost or reordered.

Flow control
------------
Local readers are held back by the ring itself: at most ``max_chunks + 1``
overflow frames can be outstanding per local reader (the pending one plus one
per chunk the writer may refill). Remote readers have no ring, so the writer
keeps at most ``remote_window`` messages un-acknowledged per remote reader:
before sending message ``seq`` it waits until ``seq - min(acked) <
remote_window`` (or times out naming the slowest ranks); a reader acks its
received count every ``ack_interval = remote_window // 4`` messages. Both
windows give the sockets' high-water marks via
:func:`~verifiedring.transport.hwm_for_window`, so nothing within a window can
be dropped.

Shutdown
--------
The writer's :meth:`MessageQueue.close` (after :meth:`wait_until_ready`)
sends ``SHUTDOWN(total)`` on both sockets, ``total`` being the number of
messages sent. A reader raises :class:`ClosedError` once it has received
``total`` messages. A local reader blocked on the ring checks its socket for
the shutdown frame every ``SLICE`` seconds.

A queue end is not thread-safe: use each from one thread.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import zmq

from .errors import BrokenPeerError, ClosedError, MisuseError, RingTimeoutError
from .layout import RingLayout
from .ring import ReaderCursor, RingHandle, ShmRingBuffer, WriterCursor
from .serialization import Serializer
from .shm import SHM_DIR, check_room
from .transport import (
    FRAMED,
    HEADER,
    INLINE,
    INLINE_LENT,
    KIND_NAMES,
    LENGTH,
    READY,
    SEND_TIMEOUT_MS,
    SHUTDOWN,
    LocalEndpoint,
    Signer,
    ack_pull,
    ack_push,
    control_header,
    hello_topic,
    hwm_for_window,
    new_key,
    parse_hello,
    remote_xpub,
    subscriber,
    tcp_wildcard_port,
)
from .waiting import DEFAULT_LOG_INTERVAL

if TYPE_CHECKING:
    from collections.abc import Sequence

logger = logging.getLogger("verifiedring")

DEFAULT_REMOTE_WINDOW = 1024
#: How long a local reader blocked on the ring waits before checking its socket
#: for the writer's shutdown frame.
SLICE = 0.2
#: How long the writer's close() lets queued frames drain to readers.
DEFAULT_LINGER = 5.0

_HDR = HEADER.size
_LEN = LENGTH.size
_ACK = struct.Struct("<IQ")  # rank, received count

_PENDING = object()  # _take's result for an overflow marker
_RING_KINDS = (INLINE, INLINE_LENT, FRAMED)  # what a ring chunk may hold


def _fill_inline(
    chunk: memoryview, kind: int, seq: int, stream: bytes, bufs: list[memoryview]
) -> None:
    """Store an object with out-of-band buffers in a chunk: header, lengths, stream, buffers."""
    nbytes = len(stream)
    HEADER.pack_into(chunk, 0, kind, seq, nbytes, len(bufs))
    off = _HDR
    for b in bufs:
        LENGTH.pack_into(chunk, off, b.nbytes)
        off += _LEN
    chunk[off : off + nbytes] = stream
    off += nbytes
    for b in bufs:
        chunk[off : off + b.nbytes] = b
        off += b.nbytes


def _load_inline(chunk: memoryview, nbytes: int, nbuf: int, lend: bool) -> Any:
    """The object :func:`_fill_inline` stored, owning its memory (the slot is reused).

    Buffers are copied out of the chunk, or, with ``lend`` (INLINE_LENT: the
    object's reconstruction copies them itself), lent as views released here.
    """
    off = _HDR + _LEN * nbuf
    start = off + nbytes
    views = []
    for i in range(nbuf):
        n = LENGTH.unpack_from(chunk, _HDR + _LEN * i)[0]
        views.append(chunk[start : start + n])
        start += n
    try:
        buffers = views if lend else [bytearray(v) for v in views]
        with chunk[off : off + nbytes] as stream:
            return pickle.loads(stream, buffers=buffers)
    finally:
        for v in views:
            v.release()



@dataclass(frozen=True)
class Handle:
    """Everything a reader needs to attach (picklable)."""

    n_reader: int
    local_reader_ranks: tuple[int, ...]
    buffer_handle: RingHandle | None
    local_subscribe_addr: str | None
    remote_subscribe_addr: str | None
    remote_ack_addr: str | None
    remote_window: int
    hmac_key: bytes = field(repr=False)


def _deadline(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if timeout < 0:
        raise MisuseError(f"timeout must be None or >= 0 seconds, got {timeout!r}")
    return time.monotonic() + timeout


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def _check_counts(
    n_reader: int, n_local_reader: int, local_reader_ranks: Sequence[int] | None
) -> tuple[int, ...]:
    for name, value in (("n_reader", n_reader), ("n_local_reader", n_local_reader)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise MisuseError(f"{name} must be an int >= 0, got {value!r}")
    if n_reader < 1:
        raise MisuseError("n_reader must be >= 1: a queue with no reader has no use")
    if n_local_reader > n_reader:
        raise MisuseError(
            f"n_local_reader={n_local_reader} exceeds n_reader={n_reader}: local readers are "
            "a subset of all readers"
        )
    ranks = tuple(range(n_local_reader) if local_reader_ranks is None else local_reader_ranks)
    if len(ranks) != n_local_reader or len(set(ranks)) != len(ranks):
        raise MisuseError(
            f"local_reader_ranks={list(ranks)} must list n_local_reader={n_local_reader} "
            "distinct ranks"
        )
    return ranks


class MessageQueue:
    """One end of a broadcast queue: the writer, a local reader or a remote reader."""

    # Declared here so __del__ and close() work on a half-built instance.
    _closed = True
    _remote_sock: zmq.Socket[Any] | None
    _ack_sock: zmq.Socket[Any] | None
    _remote_addr: str | None
    _ack_addr: str | None
    _ring: ShmRingBuffer | None
    _writer: WriterCursor | None
    _local: LocalEndpoint | None
    _local_sock: zmq.Socket[Any] | None

    def __init__(
        self,
        n_reader: int,
        n_local_reader: int,
        local_reader_ranks: list[int] | None = None,
        max_chunk_bytes: int = 10 * 1024 * 1024,
        max_chunks: int = 10,
        connect_ip: str | None = None,
        *,
        remote_window: int = DEFAULT_REMOTE_WINDOW,
        linger: float = DEFAULT_LINGER,
    ) -> None:
        ranks = _check_counts(n_reader, n_local_reader, local_reader_ranks)
        n_remote = n_reader - n_local_reader
        if n_remote and connect_ip is None:
            raise MisuseError(
                f"{n_remote} remote reader(s) need connect_ip: the address of this host "
                "that they can reach (it is bound, never a wildcard)"
            )
        if n_remote:
            tcp_wildcard_port(connect_ip or "")  # refuses wildcard addresses early
        if remote_window < 1:
            raise MisuseError(f"remote_window must be >= 1, got {remote_window}")
        layout = RingLayout(max(n_local_reader, 1), max_chunk_bytes, max_chunks)
        if n_local_reader:
            check_room(layout.total_bytes)
        self._init_common(ranks, max_chunk_bytes, max_chunks, remote_window, new_key())
        self.n_reader = n_reader
        self.rank: int | None = None
        self._is_writer = True
        self._linger_ms = int(linger * 1000)
        try:
            if n_local_reader:
                self._ring = ShmRingBuffer(n_local_reader, max_chunk_bytes, max_chunks)
                self._writer = self._ring.writer()
                self._local = LocalEndpoint(self._ctx, hwm_for_window(max_chunks + 1))
                self._local_sock = self._local.socket
            if n_remote:
                ip = connect_ip or ""
                self._remote_sock, self._remote_addr = remote_xpub(
                    self._ctx, ip, hwm_for_window(remote_window)
                )
                self._ack_sock, self._ack_addr = ack_pull(self._ctx, ip)
        except BaseException:
            self._release_resources()
            raise
        self._n_remote = n_remote
        self._closed = False

    def _init_common(
        self,
        ranks: tuple[int, ...],
        max_chunk_bytes: int,
        max_chunks: int,
        remote_window: int,
        key: bytes,
    ) -> None:
        self.local_reader_ranks = ranks
        self.n_local_reader = len(ranks)
        self.max_chunk_bytes = max_chunk_bytes
        self.max_chunks = max_chunks
        self.remote_window = remote_window
        self.ack_interval = max(1, remote_window // 4)
        # The writer drains acks once a reader may be this close to the window's end.
        self._credit_check_at = remote_window - self.ack_interval
        self._key = key
        self._signer = Signer(key)
        # The process-wide context (pyzmq makes a new one after fork). A queue never
        # terminates it: zmq_ctx_term can block forever (seen here under load even with
        # every socket closed at linger 0), and closing a socket with a linger already
        # bounds how long its queued frames may keep flowing.
        self._ctx: zmq.Context[Any] = zmq.Context.instance()
        self._ring = None
        self._writer = None
        self._reader: ReaderCursor | None = None
        self._local = None
        self._local_sock = None
        self._remote_sock = None
        self._ack_sock = None
        self._remote_addr = None
        self._ack_addr = None
        self._n_remote = 0
        self._ready = False
        self._ok_writer = False  # enqueue needs no checks (writer, ready, open, not shut down)
        self._ok_reader = False  # dequeue needs no checks (reader, ready, open, no shutdown seen)
        self._seq = 0  # writer: next to send; reader: next expected
        self._pending: int | None = None
        self._stash: deque[list[zmq.Frame]] = deque()
        self._shutdown_total: int | None = None
        self._serializer = Serializer()
        self._acked: dict[int, int] = {}
        self._floor = 0  # min over remote readers of their acked count
        self._acks_sent = 0
        self._linger_ms = 0
        self.log_interval = DEFAULT_LOG_INTERVAL
        #: Remote frames that failed authentication and were dropped unread.
        self.rejected_frames = 0

    # --- construction of readers --------------------------------------------

    def export_handle(self) -> Handle:
        if not self._is_writer:
            raise MisuseError("export_handle() is for the writer; readers attach with it")
        self._check_open()
        ring = self._ring
        return Handle(
            n_reader=self.n_reader,
            local_reader_ranks=self.local_reader_ranks,
            buffer_handle=None if ring is None else ring.handle(),
            local_subscribe_addr=None if self._local is None else self._local.address,
            remote_subscribe_addr=self._remote_addr,
            remote_ack_addr=self._ack_addr,
            remote_window=self.remote_window,
            hmac_key=self._key,
        )

    @classmethod
    def create_from_handle(cls, handle: Handle, rank: int) -> MessageQueue:
        """Attach reader ``rank``: local if it is in ``handle.local_reader_ranks``."""
        if not isinstance(handle, Handle):
            raise MisuseError(f"expected a Handle, got {type(handle).__name__}")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise MisuseError(f"rank must be an int >= 0, got {rank!r}")
        self = cls.__new__(cls)
        ranks = tuple(handle.local_reader_ranks)
        bh = handle.buffer_handle
        self._init_common(
            ranks,
            bh.max_chunk_bytes if bh else 0,
            bh.max_chunks if bh else 0,
            handle.remote_window,
            handle.hmac_key,
        )
        self.n_reader = handle.n_reader
        self.rank = rank
        self._is_writer = False
        hello = hello_topic(self._signer, rank)
        try:
            if rank in ranks:
                if bh is None or handle.local_subscribe_addr is None:
                    raise MisuseError(f"handle lists local rank {rank} but carries no ring")
                self._attach_ring(bh, ranks.index(rank))
                # spec: ReaderSubscribe
                self._local_sock = subscriber(
                    self._ctx, handle.local_subscribe_addr,
                    hwm_for_window(bh.max_chunks + 1), hello,
                )
            else:
                if handle.remote_subscribe_addr is None or handle.remote_ack_addr is None:
                    raise MisuseError(
                        f"rank {rank} is not in local_reader_ranks {list(ranks)} and the queue "
                        "has no remote readers (n_reader == n_local_reader)"
                    )
                # spec: ReaderSubscribe
                self._remote_sock = subscriber(
                    self._ctx, handle.remote_subscribe_addr,
                    hwm_for_window(handle.remote_window), hello,
                )
                self._ack_sock = ack_push(self._ctx, handle.remote_ack_addr)
        except BaseException:
            self._release_resources()
            raise
        self._closed = False
        return self

    def _attach_ring(self, bh: RingHandle, index: int) -> None:
        expected = bh.layout.total_bytes
        try:
            actual = os.stat(os.path.join(SHM_DIR, bh.name)).st_size
        except FileNotFoundError:
            actual = None  # let attach report a missing segment
        if actual is not None and actual != expected:
            raise BrokenPeerError(
                f"segment {bh.name!r} has {actual} bytes but the handle's geometry "
                f"(n_reader={bh.n_reader}, max_chunk_bytes={bh.max_chunk_bytes}, "
                f"max_chunks={bh.max_chunks}) needs {expected}: handle and segment do not match"
            )
        self._ring = ShmRingBuffer.attach(bh)
        self._reader = self._ring.reader(index)

    @classmethod
    def create_from_process_group(
        cls, pg: Any, max_chunk_bytes: int, max_chunks: int, writer_rank: int = 0
    ) -> MessageQueue:
        from .dist.group import create_from_process_group as _impl

        result: MessageQueue = _impl(cls, pg, max_chunk_bytes, max_chunks, writer_rank)
        return result

    # --- properties ------------------------------------------------------------

    @property
    def is_writer(self) -> bool:
        return self._is_writer

    @property
    def is_local_reader(self) -> bool:
        return not self._is_writer and self._reader is not None

    @property
    def is_remote_reader(self) -> bool:
        return not self._is_writer and self._reader is None

    @property
    def closed(self) -> bool:
        return self._closed

    def _who(self) -> str:
        if self._is_writer:
            return f"writer (pid {os.getpid()})"
        kind = "local" if self._reader is not None else "remote"
        return f"{kind} reader rank {self.rank} (pid {os.getpid()})"

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self._who()}: the queue is closed")

    # --- readiness -------------------------------------------------------------

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Collective: the writer waits for every reader to subscribe, then sends READY;
        each reader waits for READY. Idempotent once it has returned."""
        self._check_open()
        if self._ready:
            return
        deadline = _deadline(timeout)
        if self._is_writer:
            self._writer_ready(deadline)
        else:  # spec: ReaderAwaitReady -- READY must be consumed before any dequeue
            sock = self._local_sock if self._reader is not None else self._remote_sock
            assert sock is not None
            header = None
            while header is None:  # unauthenticated frames are dropped (and counted)
                frames = self._recv(sock, deadline, "READY from the writer")
                header = self._open_frame(frames, remote=self._reader is None)
            if header[0] != READY:
                raise BrokenPeerError(
                    f"{self._who()}: expected READY as the first message, got "
                    f"{KIND_NAMES.get(header[0], header[0])} seq {header[1]}"
                )
        self._ready = True
        self._ok_writer = self._is_writer
        self._ok_reader = not self._is_writer

    def _writer_ready(self, deadline: float | None) -> None:
        # spec: WriterHandshake -- every subscription first (essential), then READY
        want_local = set(self.local_reader_ranks)
        seen_local: set[int] = set()
        seen_remote: set[int] = set()
        poller = zmq.Poller()
        for sock in (self._local_sock, self._remote_sock):
            if sock is not None:
                poller.register(sock, zmq.POLLIN)
        next_log = time.monotonic() + self.log_interval
        while seen_local != want_local or len(seen_remote) < self._n_remote:
            rem = _remaining(deadline)
            if rem == 0.0:
                raise RingTimeoutError(
                    f"writer (pid {os.getpid()}) timed out waiting for readers to subscribe: "
                    f"local ranks {sorted(want_local - seen_local)} missing; "
                    f"{self._n_remote - len(seen_remote)} of {self._n_remote} remote readers "
                    f"missing (seen {sorted(seen_remote)})"
                )
            wait = self.log_interval if rem is None else min(rem, self.log_interval)
            events = dict(poller.poll(int(wait * 1000) + 1))
            if not events and time.monotonic() >= next_log:
                logger.warning(
                    "writer pid %d still waiting for subscriptions: local %s of %s, remote %d/%d",
                    os.getpid(), sorted(seen_local), sorted(want_local),
                    len(seen_remote), self._n_remote,
                )
                next_log = time.monotonic() + self.log_interval
            for sock, seen, is_local in (
                (self._local_sock, seen_local, True),
                (self._remote_sock, seen_remote, False),
            ):
                if sock is None or sock not in events:
                    continue
                while sock.poll(0):
                    msg = sock.recv()
                    if not msg or msg[0] != 1:
                        continue  # an unsubscribe
                    rank = parse_hello(self._signer, msg[1:])
                    if rank is None:
                        continue  # the catch-all subscription, or a forged hello
                    if is_local and rank not in want_local:
                        logger.warning("hello from rank %d, not a local reader: ignored", rank)
                        continue
                    if not is_local and rank in want_local:
                        logger.warning("remote hello from local rank %d: ignored", rank)
                        continue
                    seen.add(rank)
        if self._local_sock is not None:
            self._publish(self._local_sock, [control_header(READY, 0)], "READY")
        if self._remote_sock is not None:
            self._send_remote([control_header(READY, 0)])
        self._acked = dict.fromkeys(sorted(seen_remote), 0)

    # --- writer ----------------------------------------------------------------

    def _not_writer(self, op: str) -> MisuseError:
        return MisuseError(f"{self._who()}: {op} is for the writer; a reader calls dequeue()")

    def _check_writer(self) -> None:
        if not self._is_writer:
            raise self._not_writer("enqueue()")
        self._check_open()
        if self._shutdown_total is not None:
            raise ClosedError("writer: the queue was shut down")
        if not self._ready:
            raise MisuseError("writer: call wait_until_ready() before enqueue()")

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        """Broadcast ``obj`` to every reader. Waits at most ``timeout`` seconds for room."""
        if not self._ok_writer:
            self._check_writer()
        stream, bufs = self._serializer.dumps(obj)  # raises MisuseError before any claim
        deadline = None if timeout is None else _deadline(timeout)
        seq = self._seq
        remote = self._remote_sock
        if remote is not None and seq - self._floor >= self._credit_check_at:
            self._await_credit(seq, deadline)  # spec: WriterSendRemoteFrame's guard
        writer = self._writer
        overflow = False
        if writer is not None:
            nbytes = len(stream)
            size = _HDR + nbytes
            if bufs:
                size += _LEN * len(bufs) + sum(b.nbytes for b in bufs)
            overflow = size > self.max_chunk_bytes
            try:
                # spec: WriterPublishSlot -- INLINE object, or FRAMED marker with its seq
                with writer.acquire_write(None if deadline is None else _remaining(deadline)) as c:
                    if overflow:
                        HEADER.pack_into(c, 0, FRAMED, seq, nbytes, len(bufs))
                    elif bufs:
                        lent = INLINE_LENT if self._serializer.copies_buffers else INLINE
                        _fill_inline(c, lent, seq, stream, bufs)
                    else:
                        HEADER.pack_into(c, 0, INLINE, seq, nbytes, 0)
                        c[_HDR : _HDR + nbytes] = stream
            except RingTimeoutError as exc:
                raise self._ring_stalled(seq, exc) from None
        if overflow or remote is not None:
            parts: list[Any] = [HEADER.pack(FRAMED, seq, len(stream), len(bufs)), stream]
            for b in bufs:
                # A writable buffer may change once enqueue returns: send a copy.
                parts.append(b if b.readonly else bytes(b))
            if overflow:
                assert self._local_sock is not None
                # spec: WriterSendLocalFrame -- the payload, after its marker is published
                self._publish(self._local_sock, parts, f"overflow frame seq {seq}")
            if remote is not None:
                self._send_remote(parts)  # spec: WriterSendRemoteFrame (credit taken above)
        self._seq = seq + 1

    def _ring_stalled(self, seq: int, exc: RingTimeoutError) -> RingTimeoutError:
        assert self._writer is not None
        ranks = [self.local_reader_ranks[i] for i in self._writer.unread_by()]
        return RingTimeoutError(
            f"writer (pid {os.getpid()}) could not enqueue message seq {seq}: local reader "
            f"ranks {ranks} have not read the slot it needs; ring: {exc}"
        )

    def _send_remote(self, parts: list[Any]) -> None:
        assert self._remote_sock is not None
        self._publish(self._remote_sock, [self._signer.sign(parts), *parts], "remote frame")

    def _publish(self, sock: zmq.Socket[Any], parts: list[Any], what: str) -> None:
        """Send on an XPUB; a send blocked past SEND_TIMEOUT_MS is a broken peer."""
        try:
            sock.send_multipart(parts, copy=False)
        except zmq.Again:
            raise BrokenPeerError(
                f"writer (pid {os.getpid()}): {what} could not be queued within "
                f"{SEND_TIMEOUT_MS / 1000:.0f} s: a reader's pipe stayed at its high-water mark, "
                "which the protocol's window should make impossible; is a reader wedged?"
            ) from None

    def _drain_acks(self) -> None:
        sock = self._ack_sock
        assert sock is not None
        acked = self._acked
        while sock.poll(0):
            mac, body = (f.bytes for f in sock.recv_multipart(copy=False)[:2])
            if len(body) != _ACK.size or not self._signer.verify(mac, [body]):
                self.rejected_frames += 1
                logger.warning("writer: dropped an unauthenticated acknowledgement")
                continue
            rank, count = _ACK.unpack(body)
            if rank in acked and count > acked[rank]:
                acked[rank] = count
        self._floor = min(acked.values()) if acked else self._seq

    def _await_credit(self, seq: int, deadline: float | None) -> None:
        """Wait until sending ``seq`` keeps every remote reader within the window."""
        self._drain_acks()
        sock = self._ack_sock
        assert sock is not None
        next_log = time.monotonic() + self.log_interval
        while seq - self._floor >= self.remote_window:
            rem = _remaining(deadline)
            if rem == 0.0:
                raise RingTimeoutError(
                    f"writer (pid {os.getpid()}) could not enqueue message seq {seq}: remote "
                    f"readers {self._lagging(seq)} are {self.remote_window} or more messages "
                    "behind (rank: acknowledged count)"
                )
            wait = self.log_interval if rem is None else min(rem, self.log_interval)
            sock.poll(int(wait * 1000) + 1)
            self._drain_acks()
            if time.monotonic() >= next_log:
                logger.warning("writer: waiting for remote readers %s", self._lagging(seq))
                next_log = time.monotonic() + self.log_interval

    def _lagging(self, seq: int) -> dict[int, int]:
        return {r: c for r, c in self._acked.items() if seq - c >= self.remote_window}

    # --- readers ----------------------------------------------------------------

    def _check_reader(self) -> None:
        if self._is_writer:
            raise MisuseError(f"{self._who()}: dequeue() is for readers; the writer enqueues")
        self._check_open()
        if not self._ready:
            raise MisuseError(f"{self._who()}: call wait_until_ready() before dequeue()")
        total = self._shutdown_total
        if total is not None and self._seq >= total:
            raise ClosedError(
                f"{self._who()}: the writer shut the queue down after {total} messages"
            )

    def dequeue(self, timeout: float | None = None) -> Any:
        """The next object, in the writer's order. Raises RingTimeoutError after
        ``timeout`` seconds (retrying is safe), ClosedError after shutdown."""
        if not self._ok_reader:
            self._check_reader()
        deadline = None if timeout is None else _deadline(timeout)
        reader = self._reader
        if reader is None:
            return self._dequeue_remote(deadline)
        if self._pending is None:
            first = SLICE if timeout is None or timeout > SLICE else timeout
            try:
                with reader.acquire_read(first) as c:
                    obj = self._take(c)
            except RingTimeoutError:
                obj = self._wait_ring(reader, deadline)
            if obj is not _PENDING:
                return obj
        return self._recv_pending(deadline)  # spec: ReaderResume when _pending was set

    def _take(self, chunk: memoryview) -> Any:
        """The object in a ring chunk, or _PENDING after taking an overflow marker."""
        # spec: ReaderTakeSlot -- the caller's with-block releases the slot either way
        kind, seq, nbytes, nbuf = HEADER.unpack_from(chunk)
        if seq != self._seq or kind not in _RING_KINDS:
            raise self._out_of_order("ring", kind, seq)
        if kind == FRAMED:
            self._pending = seq  # the slot is released on return; the frame is awaited
            return _PENDING
        if nbuf:
            obj = _load_inline(chunk, nbytes, nbuf, lend=kind == INLINE_LENT)
        else:
            with chunk[_HDR : _HDR + nbytes] as stream:
                obj = pickle.loads(stream)
        self._seq = seq + 1
        return obj

    def _wait_ring(self, reader: ReaderCursor, deadline: float | None) -> Any:
        """Slow path: wait for the ring in slices, checking the socket for SHUTDOWN."""
        start = time.monotonic()
        next_log = start + self.log_interval
        sock = self._local_sock
        assert sock is not None
        while True:
            if sock.poll(0):
                self._stash.append(sock.recv_multipart(copy=False))
                kind, seq = HEADER.unpack_from(self._stash[-1][0].buffer)[:2]
                if kind == SHUTDOWN:
                    self._stash.pop()
                    self._shutdown_total = seq
                    self._ok_reader = False
                # A FRAMED frame here belongs to a marker published since the last poll.
            total = self._shutdown_total
            if total is not None and self._seq >= total:
                raise ClosedError(
                    f"{self._who()}: the writer shut the queue down after {total} messages"
                )
            rem = _remaining(deadline)
            if rem == 0.0:
                raise RingTimeoutError(
                    f"{self._who()} timed out after {time.monotonic() - start:.3f} s waiting "
                    f"for message seq {self._seq} in ring slot {reader.index} "
                    f"({reader.flag_state()})"
                )
            now = time.monotonic()
            if now >= next_log:
                logger.warning(
                    "%s still waiting after %.1f s for seq %d in ring slot %d",
                    self._who(), now - start, self._seq, reader.index,
                )
                next_log = now + self.log_interval
            try:
                with reader.acquire_read(SLICE if rem is None else min(rem, SLICE)) as c:
                    return self._take(c)
            except RingTimeoutError:
                continue

    def _recv_pending(self, deadline: float | None) -> Any:
        # spec: ReaderRecvFrame
        pending = self._pending
        assert pending is not None and self._local_sock is not None
        if self._stash:
            frames = self._stash.popleft()
        else:
            # spec: ReaderTimeout -- _recv raises RingTimeoutError and self._pending stays
            # set, so the retry returns this same object (the known trap cannot happen)
            frames = self._recv(
                self._local_sock, deadline,
                f"overflow frame seq {pending} on the local socket (ring slot already released)",
            )
        kind, seq = HEADER.unpack_from(frames[0].buffer)[:2]
        if kind != FRAMED or seq != pending:
            raise self._out_of_order("local socket", kind, seq)
        self._pending = None
        self._seq = seq + 1
        return pickle.loads(frames[1].buffer, buffers=[f.buffer for f in frames[2:]])

    def _dequeue_remote(self, deadline: float | None) -> Any:
        # spec: RemoteRecvFrame -- verify, deliver, acknowledge (returns credits)
        sock = self._remote_sock
        assert sock is not None
        while True:
            frames = self._recv(sock, deadline, f"message seq {self._seq} on the remote socket")
            header = self._open_frame(frames, remote=True)
            if header is None:
                continue
            kind, seq = header[:2]
            if kind == SHUTDOWN:
                self._shutdown_total = seq
                self._ok_reader = False
                self._check_reader()
            if kind != FRAMED or seq != self._seq:
                raise self._out_of_order("remote socket", kind, seq)
            self._seq = count = seq + 1
            if count - self._acks_sent >= self.ack_interval:
                self._ack(count)
            return pickle.loads(frames[2].buffer, buffers=[f.buffer for f in frames[3:]])

    def _ack(self, count: int) -> None:
        assert self._ack_sock is not None and self.rank is not None
        body = _ACK.pack(self.rank, count)
        self._ack_sock.send_multipart([self._signer.sign([body]), body])
        self._acks_sent = count

    def _open_frame(
        self, frames: list[zmq.Frame], remote: bool
    ) -> tuple[int, int, int, int] | None:
        """The header of a received message; for a remote one, ``None`` (after counting
        and logging) unless its MAC verifies -- checked before anything is unpickled."""
        if remote:
            parts = [f.buffer for f in frames[1:]]
            if len(frames) < 2 or not self._signer.verify(frames[0].buffer, parts):
                self.rejected_frames += 1
                logger.warning(
                    "%s dropped a remote frame that failed HMAC verification (%d so far)",
                    self._who(), self.rejected_frames,
                )
                return None
            frames = frames[1:]
        if frames[0].buffer.nbytes != _HDR:
            raise BrokenPeerError(
                f"{self._who()}: malformed header of {frames[0].buffer.nbytes} bytes"
            )
        header: tuple[int, int, int, int] = HEADER.unpack_from(frames[0].buffer)
        return header

    def _recv(self, sock: zmq.Socket[Any], deadline: float | None, what: str) -> list[zmq.Frame]:
        try:
            return sock.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            pass
        start = time.monotonic()
        next_log = start + self.log_interval
        while True:
            rem = _remaining(deadline)
            if rem == 0.0:
                raise RingTimeoutError(
                    f"{self._who()} timed out after {time.monotonic() - start:.3f} s "
                    f"waiting for {what}"
                )
            wait = self.log_interval if rem is None else min(rem, self.log_interval)
            if sock.poll(int(wait * 1000) + 1):
                return sock.recv_multipart(copy=False)
            if time.monotonic() >= next_log:
                logger.warning("%s still waiting for %s", self._who(), what)
                next_log = time.monotonic() + self.log_interval

    def _out_of_order(self, channel: str, kind: int, seq: int) -> BrokenPeerError:
        return BrokenPeerError(
            f"{self._who()}: on the {channel} got {KIND_NAMES.get(kind, kind)} seq {seq}, "
            f"expected message seq {self._seq}: a message was lost or reordered"
        )

    # --- both --------------------------------------------------------------------

    def broadcast_object(self, obj: Any = None) -> Any:
        """Writer: enqueue ``obj`` and return it. Reader: return the next object."""
        if self._is_writer:
            self.enqueue(obj)
            return obj
        return self.dequeue()

    def shutdown(self) -> None:
        """Writer: tell every reader that no more messages follow (idempotent)."""
        if not self._is_writer:
            raise self._not_writer("shutdown()")
        self._check_open()
        if not self._ready or self._shutdown_total is not None:
            return
        self._ok_writer = False
        self._shutdown_total = total = self._seq
        header = control_header(SHUTDOWN, total)
        if self._local_sock is not None:
            self._publish(self._local_sock, [header], "SHUTDOWN")
        if self._remote_sock is not None:
            self._send_remote([header])

    def close(self) -> None:
        """Shut down (writer), close sockets and the segment. Idempotent."""
        if self._closed:
            return
        try:
            if self._is_writer:
                self.shutdown()
        finally:
            self._closed = True
            self._ok_writer = self._ok_reader = False
            self._release_resources()

    def _release_resources(self) -> None:
        self._serializer.release()
        self._stash.clear()
        linger = self._linger_ms
        for sock in (self._local_sock, self._remote_sock, self._ack_sock):
            if sock is not None:
                sock.close(linger=linger)
        if self._local is not None:
            self._local.remove_directory()
        if self._ring is not None:
            self._ring.close()

    def __enter__(self) -> MessageQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed:
            warnings.warn(
                f"MessageQueue ({self._who()}) was not closed; call close() or use it as a "
                "context manager",
                ResourceWarning,
                stacklevel=2,
            )
