"""footprint: the /dev/shm bytes vLLM's executor ring and a worker's queue hold.

vLLM's multiproc executor builds ``MessageQueue(world_size, local_world_size,
max_chunk_bytes=24 MiB)`` (10 chunks) and each worker a ``MessageQueue(1, 1)``
for its responses. This bench builds both in one process (every reader local,
in this process too), sends ``--messages`` messages of ``--size`` bytes
through each, and reports the bytes each segment holds (its backed pages,
``st_blocks * 512``) at create and after the messages, next to the baseline:
the segment committed whole, as every page reserved at create holds.
"""

from __future__ import annotations

import argparse

from verifiedring import MessageQueue
from verifiedring.reservation import PAGE
from verifiedring.testing.faults import writer_ring

WAIT = 30.0
MIB = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=1000, help="messages per queue")
    parser.add_argument("--size", type=int, default=1024, help="bytes per message")
    parser.add_argument("--world", type=int, default=2, help="the executor ring's readers")


def _pair(
    n_local: int, max_chunk_bytes: int | None = None
) -> tuple[MessageQueue, list[MessageQueue]]:
    """A writer of ``n_local`` local readers (10 chunks of ``max_chunk_bytes``, default
    the queue's: vLLM's), its readers, handshaken."""
    w = (
        MessageQueue(n_local, n_local) if max_chunk_bytes is None
        else MessageQueue(n_local, n_local, max_chunk_bytes=max_chunk_bytes, max_chunks=10)
    )
    readers = [MessageQueue.create_from_handle(w.export_handle(), r) for r in range(n_local)]
    w.wait_until_ready(WAIT)
    for r in readers:
        r.wait_until_ready(WAIT)
    return w, readers


def _held(q: MessageQueue) -> int:
    return writer_ring(q).held_bytes()


def _whole(q: MessageQueue) -> int:
    total = writer_ring(q).layout.total_bytes
    return -(-total // PAGE) * PAGE


def main(args: argparse.Namespace) -> int:
    executor = _pair(args.world, 24 * MIB)
    worker = _pair(1)
    rows = [("executor ring", *executor), ("worker MessageQueue(1, 1)", *worker)]
    try:
        at_create = [_held(w) for _, w, _ in rows]
        payload = b"x" * args.size
        for i in range(args.messages):
            for _, w, readers in rows:
                w.enqueue((i, payload), WAIT)
                for r in readers:
                    r.dequeue(WAIT)
        after = [_held(w) for _, w, _ in rows]
        print(f"{args.messages} messages of {args.size} bytes; page {PAGE} bytes")
        print(f"{'queue':28} {'at create':>12} {'after':>12} {'committed whole':>16}")
        for (name, w, _), c, a in zip(rows, at_create, after, strict=True):
            print(f"{name:28} {c:>12} {a:>12} {_whole(w):>16}")
        total, whole = sum(after), sum(_whole(w) for _, w, _ in rows)
        print(f"{'total':28} {sum(at_create):>12} {total:>12} {whole:>16}")
        print(f"held: {total / 1024:.0f} KiB ({total // PAGE} pages); whole: {whole / MIB:.0f} MiB")
    finally:
        for _, w, readers in rows:
            for r in readers:
                r.close()
            w.close()
    return 0
