"""What each namespace host of :mod:`faults.test_multihost` runs (see
:mod:`verifiedring.testing.multihost`): one function per host and case, called as
``fn(site, *args)``; each returns a dict of what it observed. Hosts hand each other
handles and go signals through ``site.put`` / ``site.get``; every wait is bounded.
The clocks agree across hosts (one kernel, CLOCK_MONOTONIC), so a host can time
what another observed from a timestamp it published.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from faults.drivers import (
    SMALL,
    T,
    collect,
    error_of,
    outcome,
    readers,
    received,
    remote_reader_proc,
    stop_readers,
)
from stress.queue import Config, make_object, reader_main
from verifiedring import MessageQueue
from verifiedring.hosts import host_identity, writer_connect_ip
from verifiedring.queue import QueueWriter
from verifiedring.testing.launcher import Supervisor, Task, problems, run_tasks
from verifiedring.testing.multihost import Site

Obs = dict[str, Any]
QUEUE_CHUNK = 40 * 1024  # many of stress.queue's objects are larger: out of band
GLOO_PORT = 29517  # the TCP store, on host A's 198.18 address
CLOSE_GRACE = 2.0


def _readers_outcome(sup: Supervisor, bound: float) -> Obs:
    outcomes = sup.wait(bound)
    return {"readers": {o.name: o.value for o in outcomes if o.ok},
            "problems": problems(outcomes)}


# --- a queue across two hosts ----------------------------------------------------------


def checked_reader(cfg: Config, handle: Any, rank: int) -> tuple[int, list[str], str]:
    """stress.queue's exact reader, plus the host identity of its process."""
    got, errors = reader_main(cfg, handle, rank)
    return got, errors, host_identity()


def queue_writer(site: Site, n: int, seed: int, remote_ranks: list[int],
                 window: int | None) -> Obs:
    """Host A: the writer, local readers 0 and 1; readers ``remote_ranks`` are elsewhere
    (``window``: the remote credit window, None: the default)."""
    cfg = Config(seed, n, None, 0.0, 0.0, T)
    kw = {} if window is None else {"remote_window": window}
    w = MessageQueue(2 + len(remote_ranks), 2, [0, 1], max_chunk_bytes=QUEUE_CHUNK,
                     max_chunks=4, connect_ip=writer_connect_ip(), **kw)
    handle = w.export_handle()
    site.put("handle", handle)
    obs: Obs = {"identity": host_identity(), "subscribe": handle.remote_subscribe_addr,
                "ack": handle.remote_ack_addr}
    with Supervisor([Task(checked_reader, (cfg, handle, r), f"rank {r}") for r in (0, 1)]) as s:
        w.wait_until_ready(T)
        t0 = time.monotonic()
        for k in range(n):
            w.enqueue(make_object(seed, k), timeout=T)
        obs["send_seconds"] = time.monotonic() - t0
        w.close()
        obs.update(_readers_outcome(s, 3 * T))
    return obs


def queue_remote_readers(site: Site, n: int, seed: int, ranks: list[int]) -> Obs:
    """Host B: readers ``ranks`` (remote: TCP to host A). This host's /dev/shm lacks the
    writer's segment, so even a local rank of the handle cannot attach here."""
    cfg = Config(seed, n, None, 0.0, 0.0, T)
    handle = site.get("handle", T)
    obs: Obs = {"identity": host_identity(), "connect_ip": writer_connect_ip()}
    obs["local_attach"] = outcome(lambda: MessageQueue.create_from_handle(handle, 0).close())
    with Supervisor([Task(checked_reader, (cfg, handle, r), f"rank {r}") for r in ranks]) as s:
        obs.update(_readers_outcome(s, 4 * T))
    return obs


# --- a gloo world of 4 ranks, 2 per host ----------------------------------------------


def gloo_rank(rank: int, world: int, master: str, writer: int) -> Obs:
    """One rank: the world's TCP store is on ``master``; then the cross-host body."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{master}:{GLOO_PORT}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=T * 3))
    try:
        return _across_hosts(rank, writer)
    finally:
        dist.destroy_process_group()


def _across_hosts(rank: int, writer: int) -> Obs:
    from support.dist_worlds import exercise_broadcaster, exercise_workers

    from verifiedring.distributed import GroupBroadcaster

    b = GroupBroadcaster.create(writer_rank=writer, max_chunk_bytes=1 << 20, max_chunks=6,
                                timeout=T * 3)
    q = b.queue
    assert q is not None
    out: Obs = {"rank": rank, "identity": host_identity(), "host": socket.gethostname()}
    if rank == writer:
        assert isinstance(q, MessageQueue)  # the group's queue, not another channel
        h = q.export_handle()
        out["role"] = "writer"
        out["local_ranks"] = list(h.local_reader_ranks)
        out["subscribe"] = h.remote_subscribe_addr
    else:
        out["role"] = "local" if getattr(q, "is_local_reader", False) else (
            "remote" if getattr(q, "is_remote_reader", False) else "?")
    out["checks"] = exercise_broadcaster(b, "cpu", seed=31)
    out["workers"] = exercise_workers(b, calls=200, failing_rank=3)
    b.close()
    return out


def gloo_host(site: Site, ranks: list[int], world: int, writer: int) -> Obs:
    """This host's ranks of the world (spawned); the store is on host 0."""
    tasks = [Task(gloo_rank, (r, world, site.addresses[0], writer), f"rank {r}") for r in ranks]
    with Supervisor(tasks) as s:
        return _readers_outcome(s, 6 * T)


# --- a cut-off writer host, a killed remote reader -------------------------------------


#: The heartbeat timeout of the queues whose host is cut off: a cut link is named once
#: this much silence has passed (test_multihost.HEARTBEAT_BOUND allows for load).
CUT_HEARTBEAT = 1.0


def _writer_with_local_reader(site: Site, n_remote: int) -> tuple[MessageQueue, Supervisor]:
    """A writer on this host with local reader 0 (spawned, task "rank 0") and ``n_remote``
    remote ranks 1..n_remote elsewhere; the handle is published as "handle"."""
    w = MessageQueue(1 + n_remote, 1, [0], connect_ip=writer_connect_ip(), max_chunks=4,
                     max_chunk_bytes=SMALL, remote_window=4, heartbeat_timeout=CUT_HEARTBEAT)
    handle = w.export_handle()
    site.put("handle", handle)
    local = readers(handle, [0])
    local.start()
    return w, local


def _fill_until_broken(w: MessageQueue, sent: list[Any]) -> Obs:
    def fill() -> None:
        while True:  # the ring or the remote window fills, then it waits: timeout=None
            w.enqueue(f"more {len(sent)}", timeout=None)
            sent.append(f"more {len(sent)}")

    return outcome(fill)


def _local_reader_report(w: MessageQueue, sent: list[Any], local: Supervisor) -> Obs:
    """What the local reader got of ``sent``, its errors, and what it saw in the
    ``CLOSE_GRACE`` seconds after the writer's close (its process living on)."""
    out = local.channel("rank 0")
    reports = collect(out, lambda g: len(received(g, 0)) >= len(sent))
    w.close()
    reports += collect(out, lambda g: any(r[1] == "error" for r in g), bound=CLOSE_GRACE)
    stop_readers(local)
    return {"local_got": received(reports, 0),
            "local_errors": [r[2] for r in reports if r[1] == "error"],
            "local_error_messages": [r[3] for r in reports if r[1] == "error"]}


def _writer_side_fault(
    site: Site, n_remote: int, fault: Callable[[int], tuple[float, Obs]]
) -> Obs:
    """Host A's part of a fault: writer + local reader 0 warm up with 3 messages; then
    ``fault(3)`` makes the fault happen (returning when it did, and what it observed),
    and the writer, filling with timeout=None, must be told; then what the local reader got."""
    w, local = _writer_with_local_reader(site, n_remote)
    obs: Obs = {}
    try:
        w.wait_until_ready(T)
        sent = [f"warm {i}" for i in range(3)]
        for m in sent:
            w.enqueue(m, timeout=T)
        at, seen = fault(len(sent))
        obs.update(seen)
        obs["fill"] = _fill_until_broken(w, sent)
        obs["detect_seconds"] = time.monotonic() - at
        obs["after"] = error_of(lambda: w.enqueue("after", timeout=0))
        obs["sent"] = list(sent)
        obs.update(_local_reader_report(w, sent, local))
    finally:
        stop_readers(local)
        w.close()
    return obs


def writer_cut_off(site: Site) -> Obs:
    """Host A: writer + local reader 0; remote reader 1 on host B. After a warm-up this
    host takes itself off the network; the writer, filling with timeout=None, is told."""

    def cut(warm: int) -> tuple[float, Obs]:
        site.get("remote warm", T)
        site.cut_off()
        t_cut = time.monotonic()
        site.put("cut", t_cut)
        return t_cut, {"writer_pid": os.getpid()}

    return _writer_side_fault(site, 1, cut)


def remote_reader_cut_off(site: Site) -> Obs:
    """Host B: remote reader 1; after the cut, its dequeue(timeout=None) names the writer."""
    handle = site.get("handle", T)
    obs: Obs = {"pid": os.getpid()}
    with MessageQueue.create_from_handle(handle, 1) as r:
        r.wait_until_ready(T)
        obs["warm"] = [r.dequeue(T) for _ in range(3)]
        site.put("remote warm", os.getpid())
        t_cut = site.get("cut", T)
        obs["dequeue"] = outcome(lambda: r.dequeue(None))
        obs["detect_seconds"] = time.monotonic() - t_cut
    return obs


def writer_remote_killed(site: Site) -> Obs:
    """Host A: writer + local reader 0; remote readers 1 and 2 on host B, which kills 2.
    The writer, filling with timeout=None, is told which reader on which host is gone."""

    def killed(warm: int) -> tuple[float, Obs]:
        site.put("warm sent", warm)
        news = site.get("killed", T)
        return news["at"], {"killed_pid": news["pid"]}

    return _writer_side_fault(site, 2, killed)


def remote_readers_one_killed(site: Site) -> Obs:
    """Host B: remote readers 1 and 2 (spawned, a channel each); SIGKILL rank 2."""
    run = readers(site.get("handle", T), [1, 2])
    run.start()
    outs = {r: run.channel(f"rank {r}") for r in (1, 2)}
    obs: Obs = {}
    try:
        n = site.get("warm sent", T)
        reports = collect(list(outs.values()),
                          lambda g: all(len(received(g, r)) == n for r in (1, 2)))
        obs["warm"] = {r: received(reports, r) for r in (1, 2)}
        run.signal("rank 2", signal.SIGKILL)
        site.put("killed", {"pid": run.pid("rank 2"), "at": time.monotonic()})
        obs["survivor"] = collect(outs[1], lambda g: any(x[1] == "error" for x in g), bound=T)
    finally:
        stop_readers(run)
    return obs


# --- an outsider on the reader's host ----------------------------------------------------

OUTSIDER_MESSAGES = 120


def writer_with_outsider(site: Site) -> Obs:
    """Host A: a writer with one remote reader on host B, where an outsider without the
    handle subscribes, floods and forges acks; every enqueue(timeout=1) is timed."""
    window = 8
    w = QueueWriter(1, 0, connect_ip=writer_connect_ip(), remote_window=window)
    h = w.export_handle()
    site.put("handle", h)  # for the real reader
    site.put("addresses", (h.remote_subscribe_addr, h.remote_ack_addr))  # for the outsider
    obs: Obs = {}
    try:
        w.wait_until_ready(T)
        site.get("outsider up", T)
        durations = []
        for i in range(OUTSIDER_MESSAGES):
            t0 = time.monotonic()
            w.enqueue((i, b"SECRET" * 1000), timeout=1.0)
            durations.append(time.monotonic() - t0)
        obs["max_enqueue_seconds"] = max(durations)
        site.get("reader done", T)
        obs["rejected_frames"] = w.rejected_frames
    finally:
        site.put("writer done", True)
        w.close()
    return obs


def outsider_host(site: Site) -> Obs:
    """Host B: the real remote reader (spawned) and, in this process, the outsider: two
    subscribers (plaintext, made-up CURVE keys), ack forgers and raw TCP floods."""
    import zmq
    from support.outsiders import Outsiders

    sub_addr, ack_addr = site.get("addresses", T)
    handle = site.get("handle", T)
    reader = Supervisor([Task(remote_reader_proc, (handle, OUTSIDER_MESSAGES, OUTSIDER_MESSAGES),
                              name="reader")])
    reader.start()
    out = reader.channel("reader")
    outsider = Outsiders()  # made-up CURVE keys name a made-up server key too
    forged = (1).to_bytes(4, "little") + (10**6).to_bytes(8, "little")
    obs: Obs = {}
    try:
        subs = [outsider.socket(zmq.SUB, sub_addr, keys=k) for k in (False, True)]
        ackers = [outsider.socket(zmq.PUSH, ack_addr, keys=k) for k in (False, True)]
        outsider.flood(sub_addr, ack_addr)
        site.put("outsider up", True)
        got: list[Any] = []
        deadline = time.monotonic() + T
        while len(got) < OUTSIDER_MESSAGES and time.monotonic() < deadline:
            for a in ackers:
                with contextlib.suppress(zmq.Again):
                    a.send(forged, zmq.NOBLOCK)
            with contextlib.suppress(TimeoutError):
                got.append(out.recv(0.05))
        obs["reader_got_all"] = got == [(i, b"SECRET" * 1000) for i in range(OUTSIDER_MESSAGES)]
        site.put("reader done", True)
        obs["outsider_frames"] = sum(1 for s in subs if s.poll(300))
        site.get("writer done", T)
    finally:
        outsider.close()
        reader.stop()
    return obs


# --- the fixture itself ---------------------------------------------------------------


def _identity_of_child() -> str:
    return host_identity()


def mesh_host(site: Site) -> Obs:
    """Listen on this host's address, reach every other host by name, and report what
    this host is: name, links, identity (here and in a spawned child), /dev/shm."""
    srv = socket.create_server((site.address, 7000))
    srv.settimeout(T)
    site.put(f"listening {site.index}", True)
    with open(f"/dev/shm/mark-{site.index}", "w"):
        pass
    peers = {}
    for j, name in enumerate(site.names):
        if j != site.index:
            site.get(f"listening {j}", T)
            with socket.create_connection((name, 7000), timeout=T) as c:
                c.sendall(site.name.encode())
                peers[name] = c.getpeername()[0]
    heard = set()
    for _ in range(len(site.names) - 1):
        conn, _ = srv.accept()
        with conn:
            heard.add(conn.recv(64).decode())
    obs: Obs = {"name": socket.gethostname(), "links": sorted(n for _, n in socket.if_nameindex()),
                "identity": host_identity(), "peers": peers, "heard": sorted(heard),
                "shm": sorted(os.listdir("/dev/shm")), "connect_ip": writer_connect_ip()}
    (obs["child_identity"],) = run_tasks([Task(_identity_of_child)], timeout=T)
    site.put(f"done {site.index}", True)
    for j in range(len(site.names)):
        site.get(f"done {j}", T)  # nobody's server goes before everyone connected
    os.unlink(f"/dev/shm/mark-{site.index}")
    return obs


def failing_host(site: Site, how: str) -> Obs:
    """Raise, or hang past the host's bound, with a child process and a file in /dev/shm."""
    subprocess.Popen(["sleep", "600"])  # left running: a straggler
    with open("/dev/shm/left-behind", "w"):
        pass
    if how == "raise":
        raise RuntimeError(f"planned failure on {site.name}")
    time.sleep(600)
    return {}
