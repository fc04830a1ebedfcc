"""tensor_arena: a 64 MiB CPU tensor to 3 local reader processes, arena vs in-band pickling.

Two queues from one writer to the same 3 reader processes (spawned), timed in the
same run, alternating: ``enable_shm_tensor_arena=True`` (the tensor is copied once
into an arena slot; each reader gets a view of the slot) and the in-band baseline:
``pickle.dumps(tensor)`` enqueued as bytes (torch's own pickling: the bytes are
copied into the pickle stream, into the overflow frame, and out again by each
reader's ``pickle.loads``). A message is timed from ``enqueue`` until all 3
readers have their tensor (each acknowledges on a pipe). Copies of the tensor's
bytes: the arena's are counted (``ArenaWriter.copies``; a reader's copy is ruled
out by its tensor's ``data_ptr`` lying inside the arena mapping); the baseline's
are those its path makes by construction (1 + 1 on the writer, 1 per reader).

``--small``: the Serializer's cost per message for a 1 KiB object, without torch
imported (a fresh interpreter) and with it, next to plain ``pickle.dumps``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import pickle
import statistics
import subprocess
import sys
import time
from typing import Any

MIB = 1 << 20
N_READERS = 3
T = 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mib", type=int, default=64, help="tensor size in MiB")
    parser.add_argument("--iters", type=int, default=8, help="messages per repeat and variant")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="only the 1 KiB serializer cost")


def _reader(handles: dict[str, Any], rank: int, iters: int, repeats: int, acks: Any) -> None:
    import ctypes

    from verifiedring import MessageQueue
    from verifiedring.arena import ArenaReader
    from verifiedring.testing.faults import arena_of

    queues = {k: MessageQueue.create_from_handle(h, rank) for k, h in handles.items()}
    for q in queues.values():
        q.wait_until_ready(T)
    arena = arena_of(queues["arena"])
    assert isinstance(arena, ArenaReader)
    base = ctypes.addressof(ctypes.c_char.from_buffer(arena.segment.buf))
    end = base + len(arena.segment.buf)
    zero_copy = 0
    for _ in range(repeats):
        for name, q in queues.items():
            for _ in range(iters):
                got = q.dequeue(T)
                t = got["t"] if name == "arena" else pickle.loads(got)
                zero_copy += name == "arena" and base <= t.data_ptr() < end
                acks.send(float(t[-1]))  # touched: the reader has its tensor
                del t, got
    for q in queues.values():
        q.close()
    acks.send(zero_copy)


def _small() -> None:
    code = (
        "import pickle, timeit, sys\n"
        "from verifiedring.queue.serialization import Serializer\n"
        "obj = {'a': list(range(50)), 'b': 'x' * 500, 'c': {'d': 1.5}, 'f': b'y' * 300}\n"
        "assert 900 < len(pickle.dumps(obj, protocol=5)) < 1200\n"
        "if sys.argv[1] == 'torch': import torch\n"
        "s = Serializer()\n"
        "n = 200_000\n"
        "f = lambda: s.dumps(obj)\n"
        "g = lambda: pickle.dumps(obj, protocol=5)\n"
        "ts = [min(timeit.repeat(h, number=n, repeat=5)) / n * 1e6 for h in (f, g)]\n"
        "print(f'{ts[0]:.2f} {ts[1]:.2f}')\n"
    )
    for mode in ("no-torch", "torch"):
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True,
                             text=True, check=True, timeout=600).stdout.split()
        print(f"Serializer.dumps of a 1 KiB object, {mode:8}: {float(out[0]):.2f} us "
              f"(pickle.dumps: {float(out[1]):.2f} us, ratio {float(out[0]) / float(out[1]):.2f})")


def main(args: argparse.Namespace | None = None) -> int:
    if args is None:
        p = argparse.ArgumentParser()
        add_arguments(p)
        args = p.parse_args([])
    print("tensor_arena: the machine may be shared; figures are medians of one run")
    _small()
    if args.small:
        return 0
    import torch

    from verifiedring import MessageQueue
    from verifiedring.arena import ArenaWriter
    from verifiedring.testing.faults import arena_of
    from verifiedring.testing.launcher import Supervisor, Task

    nbytes = args.mib * MIB
    t = torch.arange(nbytes // 4, dtype=torch.int32)
    ctx = mp.get_context("spawn")
    arena_q = MessageQueue(N_READERS, N_READERS, enable_shm_tensor_arena=True, arena_slots=2,
                           arena_slot_bytes=nbytes)
    plain_q = MessageQueue(N_READERS, N_READERS)
    queues = {"arena": arena_q, "in-band": plain_q}
    pipes = [ctx.Pipe(duplex=False) for _ in range(N_READERS)]
    handles = {k: q.export_handle() for k, q in queues.items()}
    readers = Supervisor([
        Task(_reader, (handles, r, args.iters, args.repeats, pipes[r][1]), name=f"reader {r}")
        for r in range(N_READERS)
    ])
    readers.start()
    times: dict[str, list[float]] = {k: [] for k in queues}
    try:
        for q in queues.values():
            q.wait_until_ready(T)
        for _ in range(args.repeats):
            for name, q in queues.items():
                for _ in range(args.iters):
                    t0 = time.perf_counter()
                    q.enqueue({"t": t} if name == "arena" else pickle.dumps(t), timeout=T)
                    for recv, _ in pipes:
                        if not recv.poll(T):
                            raise TimeoutError("a reader did not acknowledge in time")
                        assert recv.recv() == float(t[-1])
                    times[name].append(time.perf_counter() - t0)
        zero_copy = [recv.recv() if recv.poll(T) else -1 for recv, _ in pipes]
        writer_arena = arena_of(arena_q)
        assert isinstance(writer_arena, ArenaWriter)
        copies = writer_arena.copies
    finally:
        for q in queues.values():
            q.close()
        readers.wait(T)
    n = args.iters * args.repeats
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.mib} MiB CPU tensor to {N_READERS} local reader processes, {n} messages each:")
    print(f"  arena:   {med['arena'] * 1e3:8.2f} ms per message (enqueue to all readers); "
          f"copies: writer {copies / n:.0f} per message, readers 0 "
          f"(views inside the arena: {zero_copy} of {n} each)")
    print(f"  in-band: {med['in-band'] * 1e3:8.2f} ms per message; copies: writer 2 (pickle "
          f"stream, frame) + 1 per reader = {2 + N_READERS}")
    print(f"  ratio arena / in-band: {med['arena'] / med['in-band']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
