"""queue: one MessageQueue writer, 1..3 local reader processes and a remote reader.

Object ``k`` -- a small dict, bytes, a bytearray, a numpy array or a mix, of a
size drawn so that a good share overflows the (small) chunks -- is derived from
``(seed, k)`` alone, so each reader regenerates it and compares it
(:func:`same`: types, array dtypes and shapes, every byte) with what it
received: content, order and count are checked exactly. The remote reader
receives over loopback TCP, with the credit window in play. Both sides pause at
random for a few hundred microseconds. The writer ends with ``close()``, whose
shutdown makes each reader's next dequeue raise ``ClosedError``; a reader then
reports how many objects it got, which must equal the number sent. Every wait is
bounded (``--stall-timeout``); the parent kills readers that outlive
``--time-limit`` and fails (:class:`~verifiedring.testing.launcher.Supervisor`).
The parent owns the segment and always unlinks it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
import time
import traceback
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import Any

from verifiedring.testing.launcher import Supervisor, Task, problems

from ._progress import Progress, Tally, interval, record

DEFAULT_OBJECTS = 10_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--readers", type=int, default=3, choices=(1, 2, 3), help="local readers")
    parser.add_argument("--remote", type=int, default=1, choices=(0, 1, 2), help="remote readers")
    parser.add_argument(
        "--objects", type=int, default=None, metavar="N",
        help=f"objects to send (default {DEFAULT_OBJECTS}; unlimited with --duration)",
    )
    parser.add_argument("--max-chunk-bytes", type=int, default=40 * 1024, metavar="B")
    parser.add_argument("--max-chunks", type=int, default=2, metavar="K")
    parser.add_argument("--remote-window", type=int, default=64, metavar="W")
    parser.add_argument(
        "--large-objects", choices=("socket", "stream"), default="socket",
        help="objects above a chunk: the local socket, or streamed through the ring",
    )
    parser.add_argument("--pause-prob", type=float, default=0.02)
    parser.add_argument("--max-pause", type=float, default=500e-6, metavar="S")
    parser.add_argument("--stall-timeout", type=float, default=20.0, metavar="S")
    parser.add_argument(
        "--time-limit", type=float, default=None, metavar="S",
        help="kill everything and fail after S seconds (default: duration + 120)",
    )


@dataclass(frozen=True)
class Config:
    seed: int
    objects: int | None
    duration: float | None
    pause_prob: float
    max_pause: float
    stall_timeout: float


POOL_BYTES = 1 << 20  # the objects' bytes are slices of one seeded pool this large


@functools.lru_cache(maxsize=4)
def _pool(seed: int) -> bytes:
    return random.Random(f"queue pool {seed}").randbytes(POOL_BYTES)


def make_object(seed: int, k: int) -> Any:
    """Object ``k`` of the run: its kind, size and bytes depend on ``(seed, k)`` only (the
    bytes are slices of a seeded pool at offsets drawn from ``(seed, k)``: cheap to make
    again on every reader, so that every byte is checked)."""
    import numpy as np

    r = random.Random(seed * 1_000_003 + k)
    pool = _pool(seed)

    def blob(n: int) -> bytes:
        offset = r.randrange(POOL_BYTES - n + 1)
        return pool[offset : offset + n]

    x = r.random()
    if x < 0.45:
        return {"k": k, "tag": blob(r.randint(0, 300))}
    if x < 0.65:
        return blob(r.randint(1, 60_000))  # around the 40 KiB chunk
    if x < 0.75:
        return bytearray(blob(r.randint(40_000, 300_000)))  # overflow, out of band
    if x < 0.9:
        n = r.randint(1, 50_000)
        dtype = r.choice([np.uint8, np.float32, np.int64])
        return np.frombuffer(blob(n * np.dtype(dtype).itemsize), dtype=dtype).copy()
    return (k, [blob(r.randint(0, 100_000))], {"f": r.random()})


def same(got: Any, want: Any) -> bool:
    """``got`` is ``want``'s exact copy: the same types all the way down, equal contents
    (an array: its dtype, shape and every byte)."""
    if type(got) is not type(want):
        return False
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(map(same, got, want))
    if isinstance(want, dict):
        return list(got) == list(want) and all(same(got[k], want[k]) for k in want)
    if hasattr(want, "dtype"):  # numpy
        return bool(got.dtype == want.dtype and got.shape == want.shape
                    and got.tobytes() == want.tobytes())
    return bool(got == want)


class Pauser:
    def __init__(self, cfg: Config, salt: int) -> None:
        self._r = random.Random(cfg.seed * 7919 + salt)
        self._p = cfg.pause_prob
        self._max = cfg.max_pause

    def maybe(self) -> None:
        if self._r.random() < self._p:
            time.sleep(self._r.uniform(0, self._max))


def reader_main(cfg: Config, handle: Any, rank: int,
                progress: tuple[str, int, int] | None = None) -> tuple[int, list[str]]:
    """Receive until the writer's shutdown; how many objects came, and what was wrong.
    ``progress``: the counters' path, size and this reader's slot (:mod:`stress._progress`)."""
    from verifiedring import ClosedError, MessageQueue

    received = 0
    errors: list[str] = []
    tally = Tally(*(progress or (None, 0, 0)))
    try:
        with MessageQueue.create_from_handle(handle, rank) as q:
            q.wait_until_ready(cfg.stall_timeout)
            pause = Pauser(cfg, rank)
            while True:
                try:
                    obj = q.dequeue(cfg.stall_timeout)
                except ClosedError:
                    break
                if not same(obj, make_object(cfg.seed, received)) and len(errors) < 5:
                    errors.append(f"rank {rank}: object {received} differs")
                received += 1
                tally.note(received)
                pause.maybe()
    except Exception:
        errors.append(f"rank {rank} after {received} objects: {traceback.format_exc()}")
    finally:
        tally.close(received)
    return received, errors


def run(cfg: Config, args: argparse.Namespace) -> dict[str, Any]:
    from verifiedring import MessageQueue
    from verifiedring.shm import SHM_DIR

    n_local, n_remote = args.readers, args.remote
    local_ranks = list(range(1, n_local + 1))
    ranks = local_ranks + list(range(n_local + 1, n_local + n_remote + 1))  # 0 is the writer's
    time_limit = args.time_limit or (cfg.duration or 0) + 120
    summary: dict[str, Any] = {"ok": False, "sent": 0, "received": {}, "errors": []}
    start = time.monotonic()
    with MessageQueue(
        n_local + n_remote, n_local, local_ranks,
        max_chunk_bytes=args.max_chunk_bytes, max_chunks=args.max_chunks,
        connect_ip="127.0.0.1" if n_remote else None, remote_window=args.remote_window,
        large_objects=args.large_objects,
    ) as w, ExitStack() as stack:
        handle = w.export_handle()
        summary["segment"] = handle.buffer_handle.name if handle.buffer_handle else None
        shown = stack.enter_context(Progress("queue", [f"rank {r}" for r in ranks],
                                             interval(args)))
        readers = Supervisor([Task(reader_main, (cfg, handle, r, (shown.path, len(ranks), i)),
                                   f"rank {r}") for i, r in enumerate(ranks)])
        stack.enter_context(readers)  # leaves after the writer's close(): kills any left
        try:
            w.wait_until_ready(cfg.stall_timeout * 3)
            pause = Pauser(cfg, 0)
            k = 0
            while (cfg.objects is None or k < cfg.objects) and (
                cfg.duration is None or time.monotonic() - start < cfg.duration
            ):
                w.enqueue(make_object(cfg.seed, k), timeout=cfg.stall_timeout)
                k += 1
                pause.maybe()
            summary["sent"] = k
        except Exception:
            summary["errors"].append(f"writer: {traceback.format_exc()}")
        w.close()  # sends the shutdown each reader ends on; then unlinks the segment
        left = max(time_limit - (time.monotonic() - start), 1.0)
        outcomes = readers.wait(left)
    for rank, o in zip(ranks, outcomes, strict=True):
        if o.ok:
            summary["received"][rank], errors = o.value
            summary["errors"].extend(errors)
    summary["errors"].extend(problems(outcomes))
    seg = summary.get("segment")
    summary["segment_left"] = bool(seg and os.path.exists(os.path.join(SHM_DIR, seg)))
    summary["seconds"] = round(time.monotonic() - start, 2)
    summary["ok"] = (
        not summary["errors"]
        and not summary["segment_left"]
        and len(summary["received"]) == len(ranks)
        and all(n == summary["sent"] for n in summary["received"].values())
    )
    return summary


def main(args: argparse.Namespace) -> int:
    objects = args.objects if args.objects is not None else (
        None if args.duration else DEFAULT_OBJECTS
    )
    cfg = Config(
        seed=args.seed, objects=objects, duration=args.duration, pause_prob=args.pause_prob,
        max_pause=args.max_pause, stall_timeout=args.stall_timeout,
    )
    summary = run(cfg, args)
    summary["config"] = asdict(cfg)
    record("queue", summary["ok"], list(summary["received"].values()), summary["seconds"])
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        status = "ok" if summary["ok"] else "FAILED"
        print(
            f"queue: {status}: sent {summary['sent']}, received {summary['received']}, "
            f"{summary['seconds']} s, seed {cfg.seed}",
            flush=True,
        )
        for err in summary["errors"]:
            print(err, file=sys.stderr)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    from stress import add_common_arguments

    parser = argparse.ArgumentParser(prog="python -m stress.queue", description=__doc__)
    add_common_arguments(parser)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
