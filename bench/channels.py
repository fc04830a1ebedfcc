"""channels: the report's transports, writer side and reader processes.

:class:`Channels` is the writer's side of one transport (one forward channel to
every reader, one back from each); :func:`run` starts the readers (spawned, through
the launcher's ``Supervisor``), connects, and hands the channels to a ``drive``
function that times the exchange. Transports: ``verifiedring`` (the local ring),
``verifiedring-remote`` (loopback TCP), ``verifiedring-stream`` /
``verifiedring-socket`` (large objects as a run or over the local socket), the
``floor`` ring, ``pipe`` and the vLLM anchors (:mod:`bench.anchors`).
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from typing import Any

from verifiedring.testing.launcher import Supervisor, Task, raise_for

from . import anchors

WAIT = 60.0
ACK = b"k"
CHUNK = 2 * 1024 * 1024 + 4096  # every payload fits a chunk: the ring path, not overflow
SLOTS = 8
LARGE_CHUNK = 1024 * 1024  # objects above it: a run, or the overflow socket
LARGE_MODES = {"verifiedring-stream": "stream", "verifiedring-socket": "socket"}


def _queue_type(transport: str) -> Any:
    if transport in anchors.VERSIONS:
        return anchors.load(transport)
    from verifiedring import MessageQueue

    return MessageQueue


def _new_queue(transport: str, n: int, chunk: int) -> Any:
    """A writer for ``n`` readers: local ring, or remote over loopback TCP."""
    mq = _queue_type(transport)
    if transport == "verifiedring-remote":
        return mq(n, 0, connect_ip="127.0.0.1", max_chunk_bytes=chunk, max_chunks=SLOTS)
    if transport in LARGE_MODES:
        return mq(n, n, max_chunk_bytes=chunk, max_chunks=SLOTS,
                  large_objects=LARGE_MODES[transport])
    return mq(n, n, max_chunk_bytes=chunk, max_chunks=SLOTS)


class Channels:
    """The writer's side: one forward channel to every reader, one back from each."""

    def __init__(self, transport: str, n: int, ctx: Any, chunk: int) -> None:
        self.transport, self.n = transport, n
        self.backs: list[Any] = []
        if transport == "pipe":
            pairs = [ctx.Pipe() for _ in range(n)]
            self.ends = [a for a, _ in pairs]
            self.child_args: list[Any] = [b for _, b in pairs]
        elif transport == "floor":
            from .floor import FloorRing

            self.fwd: Any = FloorRing(n, CHUNK, SLOTS)
            self.backs = [FloorRing(1, 4096, SLOTS) for _ in range(n)]
            self.child_args = [(self.fwd.name, b.name) for b in self.backs]
        else:
            self.fwd = _new_queue(transport, n, chunk)
            self.handles = ctx.Queue()
            self.child_args = [(self.fwd.export_handle(), self.handles) for _ in range(n)]

    def connect(self) -> None:
        """After the children started: the queues' handshakes; for the others, one ack
        from every reader (a spawned child takes a while to start)."""
        if self.transport in ("pipe", "floor"):
            self.gather()
            return
        got = dict(self.handles.get(timeout=WAIT) for _ in range(self.n))
        mq = _queue_type(self.transport)
        self.backs = [mq.create_from_handle(got[r], 0) for r in range(self.n)]
        self.fwd.wait_until_ready()
        for b in self.backs:
            b.wait_until_ready()

    def send(self, obj: Any) -> None:
        if self.transport == "pipe":
            for e in self.ends:
                e.send(obj)
        elif self.transport == "floor":
            self.fwd.send(obj)
        else:
            self.fwd.enqueue(obj)

    def gather(self) -> None:
        if self.transport == "pipe":
            for e in self.ends:
                e.recv()
        elif self.transport == "floor":
            for b in self.backs:
                b.recv(0)
        else:
            for b in self.backs:
                b.dequeue()

    def close(self) -> None:
        if self.transport == "pipe":
            return
        if self.transport == "floor":
            self.fwd.close(unlink=True)
            for b in self.backs:
                b.close(unlink=True)
            return
        for q in (*self.backs, self.fwd):
            close = getattr(q, "close", None)  # vLLM's queue has none: collection frees it
            if close is not None:
                close()


_Ends = tuple[Callable[..., Any], Callable[[], None], Callable[[], None]]


def _pipe_ends(end: Any) -> _Ends:
    def ack() -> None:
        end.send(ACK)

    return end.recv, ack, lambda: None


def _floor_ends(names: Any, r: int, n: int) -> _Ends:
    from .floor import FloorRing

    fwd = FloorRing(n, CHUNK, SLOTS, name=names[0])
    back = FloorRing(1, 4096, SLOTS, name=names[1])

    def recv() -> Any:
        return fwd.recv(r)

    def ack() -> None:
        back.send(ACK)

    def close() -> None:
        fwd.close()
        back.close()

    return recv, ack, close


def _queue_ends(transport: str, args: Any, r: int) -> _Ends:
    handle, handles = args
    mq = _queue_type(transport)
    q = mq.create_from_handle(handle, r)
    if transport == "verifiedring-remote":
        back_q = mq(1, 0, connect_ip="127.0.0.1", max_chunk_bytes=4096, max_chunks=SLOTS)
    else:
        back_q = mq(1, 1, max_chunk_bytes=4096, max_chunks=SLOTS)
    handles.put((r, back_q.export_handle()))
    back_q.wait_until_ready()
    q.wait_until_ready()

    def ack() -> None:
        back_q.enqueue(ACK)

    return q.dequeue, ack, lambda: None


def _reader(transport: str, args: Any, r: int, n: int, plan: list[tuple[int, int]]) -> int:
    """Reader ``r``: for each (count, ack_every) of ``plan``, receive ``count`` objects
    and answer every ``ack_every``-th; the number received."""
    if transport == "pipe":
        recv, ack, close = _pipe_ends(args)
    elif transport == "floor":
        recv, ack, close = _floor_ends(args, r, n)
    else:
        recv, ack, close = _queue_ends(transport, args, r)
    if transport in ("pipe", "floor"):
        ack()  # running: the writer's connect() waits for this
    got = 0
    for count, every in plan:
        for i in range(count):
            recv()
            got += 1
            if (i + 1) % every == 0:
                ack()
    close()
    return got


def run(
    transport: str, n: int, plan: list[tuple[int, int]], drive: Any, chunk: int = CHUNK
) -> Any:
    ctx = mp.get_context("spawn")
    ch = Channels(transport, n, ctx, chunk)
    try:
        tasks = [Task(_reader, (transport, ch.child_args[r], r, n, plan), name=f"reader {r}")
                 for r in range(n)]
        with Supervisor(tasks) as procs:
            ch.connect()
            result = drive(ch)
            raise_for(procs.wait(WAIT), f"{transport} readers")
    finally:
        ch.close()
    return result
