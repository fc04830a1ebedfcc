"""Drivers of the room-policy cases: what a create reserves and checks, what later
writes reserve, vLLM's layouts in a container's /dev/shm, racing creators.

Each runs inside its namespaces as :mod:`faults.drivers`' do (a private tmpfs
/dev/shm of the case's size). The policy is set as an operator sets it, through
``$VERIFIEDRING_SHM_RESERVE`` (:mod:`verifiedring.reservation`).
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from faults.drivers import SHM_DIR, Obs, T, error_of, listing, pair, shm_free
from verifiedring import MessageQueue, RingLayout, ShmRingBuffer
from verifiedring.queue import QueueWriter
from verifiedring.reservation import RESERVE_ENV, room_at_create
from verifiedring.testing.faults import writer_ring

#: vLLM 0.34's MessageQueue defaults: the executor's ring and each worker's response queue.
VLLM_CHUNK, VLLM_CHUNKS = 24 << 20, 10
#: vLLM's tensor-parallel group broadcaster: create_from_process_group(group, 1 << 22, 6).
GROUP_CHUNK, GROUP_CHUNKS = 1 << 22, 6


def use_policy(policy: str) -> None:
    os.environ[RESERVE_ENV] = policy


def needs(policy: str, n_reader: int, chunk: int, chunks: int) -> int:
    """Bytes the room check asks for, for one ring of this shape under ``policy``."""
    return room_at_create(RingLayout(n_reader, chunk, chunks), policy)


def vllm_default_ring(policy: str) -> Obs:
    """vLLM's default ring (24 MiB x 10) under ``policy`` in this /dev/shm: what a
    queue and a bare ring do at create, and, if made, whether the queue carries a
    message of a whole chunk (less its header and pickle framing)."""
    use_policy(policy)
    obs: Obs = {"free": shm_free(), "needs": needs(policy, 1, VLLM_CHUNK, VLLM_CHUNKS)}
    t0 = time.monotonic()
    obs["ring"] = error_of(lambda: ShmRingBuffer(1, VLLM_CHUNK, VLLM_CHUNKS).close())
    obs["ring"]["seconds"] = time.monotonic() - t0
    obs["queue"] = error_of(lambda: MessageQueue(1, 1).close())
    obs["left_after"] = listing()
    return obs


def vllm_layout(policy: str, tp: int, rounds: int) -> Obs:
    """vLLM's queues at tensor-parallel size ``tp`` in this /dev/shm, all in this
    process: the executor's broadcast ring (``tp`` local readers, 24 MiB x 10), one
    response queue per worker (``MessageQueue(1, 1)``) and the TP group's broadcaster
    (``tp - 1`` readers, 4 MiB x 6). Then ``rounds`` steps of traffic: a scheduler
    output (64 KiB) to every worker, each worker's output (16 KiB) back, and the
    group's broadcast (8 KiB). What each create did, what was delivered, the bytes
    held."""
    use_policy(policy)
    obs: Obs = {"free_at_start": shm_free(), "created": [], "error": None}
    queues: list[MessageQueue] = []

    def make(n: int, **kw: Any) -> tuple[MessageQueue, list[MessageQueue]]:
        w = QueueWriter(n, n, **kw)
        queues.append(w)
        handle = w.export_handle()
        rs = [MessageQueue.create_from_handle(handle, i) for i in range(n)]
        queues.extend(rs)
        w.wait_until_ready(T)
        for r in rs:
            r.wait_until_ready(T)
        obs["created"].append(w.max_chunk_bytes * w.max_chunks)
        return w, rs

    try:
        executor, workers = make(tp)
        responses = [make(1) for _ in range(tp)]
        group, members = make(tp - 1, max_chunk_bytes=GROUP_CHUNK, max_chunks=GROUP_CHUNKS)
    except Exception as exc:
        obs["error"] = {"type": type(exc).__name__, "message": str(exc)}
        for q in reversed(queues):
            q.close()
        obs["left_after"] = listing()
        return obs
    obs["free_after_create"] = shm_free()
    delivered = True
    for step in range(rounds):
        order = {"step": step, "blob": bytes([step % 251]) * (64 << 10)}
        executor.enqueue(order, timeout=T)
        for rank, (worker, (out_w, (out_r,))) in enumerate(zip(workers, responses, strict=True)):
            delivered = delivered and worker.dequeue(T) == order
            result = {"step": step, "rank": rank, "tokens": bytes([rank]) * (16 << 10)}
            out_w.enqueue(result, timeout=T)
            delivered = delivered and out_r.dequeue(T) == result
        shared = {"step": step, "meta": bytes(8 << 10)}
        group.enqueue(shared, timeout=T)
        delivered = delivered and all(m.dequeue(T) == shared for m in members)
    obs["delivered"] = delivered
    obs["free_after_traffic"] = shm_free()
    for q in reversed(queues):
        q.close()
    obs["free_at_end"] = shm_free()
    obs["left_after"] = listing()
    return obs


def _racer(
    policy: str, chunk: int, chunks: int, fill: bool, start: Any, reports: Any, done: Any
) -> None:
    """One racing creator: at ``start``, make a queue (writer and reader in this
    process) of ``chunks`` x ``chunk`` under ``policy``; carry a first message as large
    as a chunk allows; with ``fill``, then one such message per chunk, twice round the
    ring, stopping at the first error, and after it a small message. Reports a dict."""
    use_policy(policy)
    big = chunk - 200  # a whole chunk but for the header and the pickle's framing
    report: dict[str, Any] = {"created": False}
    start.wait(T)
    t0 = time.monotonic()
    try:
        w, r = pair(max_chunk_bytes=chunk, max_chunks=chunks)
    except Exception as exc:
        report["create_error"] = f"{type(exc).__name__}: {exc}"
        report["seconds"] = time.monotonic() - t0
        reports.put(report)
        return
    report["created"] = True
    first = error_of(lambda: w.enqueue(b"\x01" * big, timeout=T))
    report["first"] = first["error"] is None and r.dequeue(T) == b"\x01" * big
    report["first_error"] = first["message"]
    report["filled"] = 0
    if fill and report["first"]:
        for i in range(2 * chunks):
            blob = bytes([i % 251]) * big

            def send(blob: bytes = blob) -> None:
                w.enqueue(blob, timeout=T)

            got = error_of(send)
            if got["error"] is not None:
                report["fill_error"] = got
                report["free_at_fail"] = shm_free()
                break
            if r.dequeue(T) != blob:
                report["fill_error"] = {"error": "wrong message", "message": str(i)}
                break
            report["filled"] += 1
        report["held"] = writer_ring(w).held_bytes()
        report["small_after"] = error_of(lambda: w.enqueue({"small": 1}, timeout=T))
        report["small_after"]["got"] = r.dequeue(T) == {"small": 1}
    reports.put(report)
    done.wait(T)
    r.close()
    w.close()


def racing_creators(
    policy: str, chunk: int, chunks: int, racers: int, rounds: int, fill: bool
) -> Obs:
    """``rounds`` times: ``racers`` processes make a queue each at the same moment (a
    barrier) in this /dev/shm; what each got, per round."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    obs: Obs = {"free": shm_free(), "needs": needs(policy, 1, chunk, chunks), "rounds": []}
    for _ in range(rounds):
        start, done, reports = ctx.Barrier(racers), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_racer, args=(policy, chunk, chunks, fill, start, reports,
                                                  done)) for _ in range(racers)]
        for p in procs:
            p.start()
        got = [reports.get(timeout=3 * T) for _ in procs]
        done.set()
        for p in procs:
            p.join(T)
        obs["rounds"].append(got)
        obs["left"] = listing()
    return obs


def third_party_fills(policy: str) -> Obs:
    """A queue (1 MiB x 4) made under ``policy``; then a third party fills /dev/shm to
    the last byte. Small messages (1 KiB, twice round the ring), then one as large as
    a chunk; the filler removed, that one again."""
    use_policy(policy)
    chunk = 1 << 20
    w, r = pair(max_chunk_bytes=chunk, max_chunks=4)
    obs: Obs = {"held_at_create": writer_ring(w).held_bytes()}
    filler = os.open(os.path.join(SHM_DIR, "filler"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.posix_fallocate(filler, 0, shm_free())
        obs["free_filled"] = shm_free()
        small = [{"i": i, "b": bytes([i]) * 1024} for i in range(8)]
        sent, got = [], []
        for m in small:
            sent.append(error_of(functools.partial(w.enqueue, m, timeout=T)))
            got.append(r.dequeue(T))
        obs["small_errors"] = [s["message"] for s in sent if s["error"]]
        obs["small_delivered"] = got == small
        big = b"B" * (chunk - 200)
        obs["big"] = error_of(lambda: w.enqueue(big, timeout=T))
        obs["free_after_big"] = shm_free()
        if obs["big"]["error"] is None:
            obs["big_delivered"] = r.dequeue(T) == big
        os.close(filler)
        filler = -1
        os.unlink(os.path.join(SHM_DIR, "filler"))
        if obs["big"]["error"] is not None:
            obs["retry"] = error_of(lambda: w.enqueue(big, timeout=T))
            obs["big_delivered"] = r.dequeue(T) == big
    finally:
        if filler >= 0:
            os.close(filler)
            os.unlink(os.path.join(SHM_DIR, "filler"))
        r.close()
        w.close()
    obs["left_after"] = listing()
    return obs
