"""Drivers of the cases where a reader dies and the writer breaks: the others are told.

Each runs inside its namespaces as :mod:`faults.drivers`' do. The writer runs in
the driver's process; the survivor (rank 0) and the victim (rank 1) are spawned
readers; SIGKILL ends the victim after the handshake.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

from faults.drivers import LOOPBACK, SMALL, Obs, T, collect, outcome, readers, stop_readers
from verifiedring import MessageQueue
from verifiedring.queue.handle import Handle
from verifiedring.testing.launcher import Supervisor, Task, channel

#: The object a run carries: 12 chunks of SMALL bytes, so the writer is mid-run
#: when the 2-chunk ring is full of what the killed reader never read.
RUN_BYTES = 12 * SMALL


def survivor_proc(handle: Handle, timeout: float | None) -> None:
    """Rank 0: report ("ready"), then every message ("got", value) until a dequeue
    with ``timeout`` raises: ("error", type, message, seconds since the last return)."""
    line = channel()
    with MessageQueue.create_from_handle(handle, 0) as r:
        r.wait_until_ready(T)
        line.send(("ready", os.getpid()))
        while True:
            t0 = time.monotonic()
            try:
                got = r.dequeue(timeout)
            except Exception as exc:
                line.send(("error", type(exc).__name__, str(exc), time.monotonic() - t0))
                return
            line.send(("got", len(got) if isinstance(got, bytes) else got))


def reader_killed_survivor_told(channel_kind: str, flavor: str) -> Obs:
    """Local (or remote) ranks 0 and 1; SIGKILL rank 1; the writer sends until it
    breaks; what rank 0, dequeuing with timeout=None (flavor "inline") or -- mid-run,
    ``large_objects="stream"`` -- with timeout=5 (flavor "run"), gets and raises."""
    local = channel_kind == "local"
    run = flavor == "run"
    w = MessageQueue(
        2, 2 if local else 0, [0, 1] if local else [], connect_ip=LOOPBACK, max_chunks=2,
        max_chunk_bytes=SMALL, remote_window=4, large_objects="stream" if run else "socket",
    )
    handle = w.export_handle()
    survivor = Supervisor([Task(survivor_proc, (handle, 5.0 if run else None), name="rank 0")])
    victim = readers(handle, [1])
    survivor.start()
    victim.start()
    line = survivor.channel("rank 0")
    obs: Obs = {"victim": victim.pid("rank 1")}
    try:
        w.wait_until_ready(T)
        w.enqueue("one", timeout=T)
        got = collect([line, victim.channel("rank 1")],
                      lambda g: len([x for x in g if "got" in x]) == 2)
        obs["first"] = len([x for x in got if "got" in x])
        victim.signal("rank 1", signal.SIGKILL)
        t_kill = time.monotonic()
        sent: list[Any] = ["one"]

        def fill() -> None:
            while True:  # the ring (2 chunks) or the window (4) fills, then it waits
                obj: Any = b"r" * RUN_BYTES if run else f"more {len(sent)}"
                w.enqueue(obj, timeout=None)
                sent.append(len(obj) if run else obj)

        obs["writer"] = outcome(fill)
        reports = collect(line, lambda g: any(x[0] == "error" for x in g), bound=T)
        obs["told_after_kill"] = time.monotonic() - t_kill
        obs["sent"] = sent
        obs["survivor_got"] = ["one", *(x[1] for x in reports if x[0] == "got")]
        errors = [x for x in reports if x[0] == "error"]
        obs["survivor_error"] = errors[0] if errors else None
        obs["close"] = outcome(w.close)
    finally:
        stop_readers(victim)
        survivor.wait(T)
        w.close()
    return obs


def reattach_proc(handle: Handle, rank: int) -> None:
    """Attach as ``rank`` and wait for READY: report ("error", type, message, seconds)
    or ("ready",)."""
    line = channel()
    t0 = time.monotonic()
    try:
        with MessageQueue.create_from_handle(handle, rank) as r:
            r.wait_until_ready(T)
            line.send(("ready",))
    except Exception as exc:
        line.send(("error", type(exc).__name__, str(exc), time.monotonic() - t0))


def killed_rank_reattached(channel_kind: str) -> Obs:
    """Local (or remote) ranks 0 and 1; SIGKILL rank 1; a new process attaches as rank
    1 while the writer goes on sending to rank 0: what the new process gets."""
    local = channel_kind == "local"
    w = MessageQueue(
        2, 2 if local else 0, [0, 1] if local else [], connect_ip=LOOPBACK, max_chunks=2,
        max_chunk_bytes=SMALL, remote_window=4,
    )
    handle = w.export_handle()
    first = readers(handle, [0, 1])
    first.start()
    obs: Obs = {}
    again = Supervisor([Task(reattach_proc, (handle, 1), name="again")])
    try:
        w.wait_until_ready(T)
        w.enqueue("one", timeout=T)
        collect([first.channel(n) for n in first.names],
                lambda g: len([x for x in g if x[1] == "got"]) == 2)
        first.signal("rank 1", signal.SIGKILL)
        again.start()
        line = again.channel("again")
        reports: list[Any] = []
        sent = 1
        deadline = time.monotonic() + T
        while not reports and time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # the writer breaks once it sees rank 1 gone
                w.enqueue(f"more {sent}", timeout=0.1)
                sent += 1
            reports = collect(line, lambda g: bool(g), bound=0.05)
        obs["again"] = reports[0] if reports else None
    finally:
        again.wait(T)
        stop_readers(first)
        w.close()
    return obs
