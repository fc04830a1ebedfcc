"""ring: one writer and 1..3 reader processes over a real ShmRingBuffer segment.

Message ``k`` is a frame ``<seq u64><length u32><payload>`` whose length and
bytes are derived from ``(seed, k)`` alone, so each reader regenerates and
checks every byte, the order and the count on its own. The writer ends the
stream with a frame of sequence number ``END`` whose length field carries
the number of messages sent. Both sides sometimes pause for a few
microseconds, also while holding a chunk. Every wait is bounded
(``--stall-timeout``); the parent kills processes that outlive
``--time-limit`` and fails (:class:`~verifiedring.testing.launcher.Supervisor`).
The parent creates the segment and always
unlinks it, also when a child crashed or was killed.

``--trace`` records the run's protocol steps in one globally ordered trace
(:mod:`verifiedring.testing.trace`: every process's cursors share a lock and a
mapped event log; at most ``--trace-events`` events) and then has TLC replay
it through ``spec/ring/RingBuffer.tla`` (``spec/trace/TraceRingBuffer.tla``); the run
fails unless the whole trace is a behavior of the spec.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import struct
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

from verifiedring import RingHandle, ShmRingBuffer
from verifiedring.shm import SHM_DIR
from verifiedring.testing.launcher import Supervisor, Task, problems

from ._progress import Progress, Tally, interval, record

FRAME = struct.Struct("<QI")  # sequence number, payload length
END = 2**64 - 1
DEFAULT_MESSAGES = 5000
DEFAULT_TRACE_MESSAGES = 200  # a traced run's default: its trace must stay small for TLC
DEFAULT_TRACE_EVENTS = 20000
MAX_PAUSE = 200e-6  # seconds
POOL_BYTES = 1 << 16  # payloads are slices of a seeded pool of this size (plus the longest)
FAILURE_GRACE = 0.5  # seconds the others may run on after one side failed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--readers", type=int, default=3, choices=(1, 2, 3))
    parser.add_argument(
        "--messages",
        type=int,
        default=None,
        metavar="N",
        help=f"messages to send (default {DEFAULT_MESSAGES}; unlimited with --duration)",
    )
    parser.add_argument("--max-chunk-bytes", type=int, default=256, metavar="B")
    parser.add_argument("--max-chunks", type=int, default=4, metavar="K")
    parser.add_argument(
        "--pause-prob",
        type=float,
        default=0.01,
        help="probability of a tiny random pause at each step of either side",
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="timeout of every single ring wait",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="S",
        help="kill everything and fail after S seconds (default: duration + 60)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="record every protocol step of every process in one trace and validate it "
        f"with TLC (default --messages {DEFAULT_TRACE_MESSAGES})",
    )
    parser.add_argument(
        "--trace-events",
        type=int,
        default=DEFAULT_TRACE_EVENTS,
        metavar="N",
        help="stop recording after N events (the run goes on; TLC checks that prefix)",
    )


@dataclass(frozen=True)
class Config:
    seed: int
    messages: int | None  # None: until the duration ends
    duration: float | None
    max_payload: int
    pause_prob: float
    stall_timeout: float


@functools.lru_cache(maxsize=4)
def _pool(seed: int, max_payload: int) -> bytes:
    return random.Random(f"ring pool {seed}").randbytes(POOL_BYTES + max_payload)


def payload(seed: int, seq: int, max_payload: int) -> bytes:
    """The payload of message ``seq``: a length and bytes that only depend on (seed, seq) --
    a slice of one seeded pool at an offset and of a length mixed from ``seq`` (a few
    hundred ns, so that every byte of every message is checked at little cost)."""
    h = ((seq + 1) * 0x9E3779B97F4A7C15 ^ seed * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    h = ((h ^ (h >> 31)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    n = h % (max_payload + 1)
    offset = (h >> 24) % POOL_BYTES
    return _pool(seed, max_payload)[offset : offset + n]


def _pause(rng: random.Random, prob: float) -> None:
    if prob and rng.random() < prob:
        if rng.random() < 0.5:
            os.sched_yield()
        else:
            time.sleep(rng.uniform(0, MAX_PAUSE))


def _recorder(handle: RingHandle, log: Any) -> Any:
    """The trace recorder of this process, or None (``log``: a TraceLog or None)."""
    if log is None:
        return None
    from verifiedring.testing.trace import TraceRecorder

    return TraceRecorder(log, handle)


def _writer_main(handle: RingHandle, cfg: Config, log: Any = None) -> int:
    """Send until the count or the duration is reached, then END; the number sent."""
    rng = random.Random(f"writer {cfg.seed}")
    ring = ShmRingBuffer.attach(handle)
    rec = _recorder(handle, log)
    seq = 0
    try:
        w = ring.writer(observer=rec)
        end = None if cfg.duration is None else time.monotonic() + cfg.duration
        while (cfg.messages is None or seq < cfg.messages) and (
            end is None or time.monotonic() < end
        ):
            msg = payload(cfg.seed, seq, cfg.max_payload)
            _pause(rng, cfg.pause_prob)
            with w.acquire_write(cfg.stall_timeout) as buf:
                FRAME.pack_into(buf, 0, seq, len(msg))
                buf[FRAME.size : FRAME.size + len(msg)] = msg
                _pause(rng, cfg.pause_prob)
            seq += 1
        with w.acquire_write(cfg.stall_timeout) as buf:
            FRAME.pack_into(buf, 0, END, seq)
    except Exception as e:
        raise RuntimeError(f"writer after {seq} messages: {e}") from e
    finally:
        if rec is not None:
            rec.close()
        ring.close()
    return seq


def _check(seed: int, seq: int, expected: int, data: bytes, max_payload: int) -> str | None:
    """What is wrong with message ``seq`` (expected number ``expected``), or None."""
    if seq != expected:
        what = "a duplicate or reordering" if seq < expected else "a skip"
        return f"expected message #{expected}, got #{seq} ({what})"
    want = payload(seed, seq, max_payload)
    if data == want:
        return None
    if len(data) != len(want):
        return f"message #{seq}: {len(data)} bytes, expected {len(want)}"
    first = next(i for i in range(len(data)) if data[i] != want[i])
    return (
        f"message #{seq}: byte {first} of {len(want)} is {data[first]:#04x}, "
        f"expected {want[first]:#04x}"
    )


def _reader_main(handle: RingHandle, k: int, cfg: Config, log: Any = None,
                 progress: tuple[str, int] | None = None) -> int:
    """Receive and check every message up to END; the number received. ``progress``:
    the counters' path and size (:mod:`stress._progress`); this reader is slot ``k``."""
    rng = random.Random(f"reader {k} {cfg.seed}")
    ring = ShmRingBuffer.attach(handle)
    rec = _recorder(handle, log)
    path, n = progress or (None, 0)
    tally = Tally(path, n, k)
    count = 0
    try:
        r = ring.reader(k, observer=rec)
        while True:
            _pause(rng, cfg.pause_prob)
            with r.acquire_read(cfg.stall_timeout) as buf:
                seq, n = FRAME.unpack_from(buf)
                if rec is not None:
                    rec.loaded(r.actor, seq)  # what this reader loaded, for the trace
                data = b"" if seq == END else bytes(buf[FRAME.size : FRAME.size + n])
                _pause(rng, cfg.pause_prob)
            if seq == END:
                if n != count:
                    raise AssertionError(f"the writer sent {n} messages, it received {count}")
                return count
            problem = _check(cfg.seed, seq, count, data, cfg.max_payload)
            if problem is not None:
                raise AssertionError(problem)
            count += 1
            tally.note(count)
    except Exception as e:
        raise RuntimeError(f"reader {k} after {count} messages: {e}") from e
    finally:
        tally.close(count)
        if rec is not None:
            rec.close()
        ring.close()


@dataclass
class Summary:
    kind: str
    ok: bool
    segment: str
    segment_left: bool
    seconds: float
    readers: int
    sent: int
    received: list[int]
    errors: list[str]
    #: --trace: events, dropped, folded, states, tlc_seconds, verdict (TLC's word), accepted, detail
    trace: dict[str, Any] | None = None


def run(args: argparse.Namespace) -> Summary:
    """Run one soak; never leaves the segment behind."""
    if args.max_chunk_bytes < FRAME.size:
        raise SystemExit(f"--max-chunk-bytes must be >= {FRAME.size} (the frame header)")
    traced = getattr(args, "trace", False)
    messages = args.messages
    if messages is None and args.duration is None:
        messages = DEFAULT_TRACE_MESSAGES if traced else DEFAULT_MESSAGES
    cfg = Config(
        seed=args.seed,
        messages=messages,
        duration=args.duration,
        max_payload=args.max_chunk_bytes - FRAME.size,
        pause_prob=args.pause_prob,
        stall_timeout=args.stall_timeout,
    )
    time_limit = args.time_limit or (args.duration or 0.0) + 60.0
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="stress-trace-") as tmp:
        log = None
        if traced:
            from verifiedring.testing.trace import TraceLog

            log = TraceLog.create(tmp, args.trace_events)
        ring = ShmRingBuffer(args.readers, args.max_chunk_bytes, args.max_chunks)
        names = [f"reader{k}" for k in range(args.readers)]
        try:
            handle = ring.handle()
            with Progress("ring", names, interval(args)) as shown:
                counters = (shown.path, len(names))
                tasks = [Task(_writer_main, (handle, cfg, log), name="writer")] + [
                    Task(_reader_main, (handle, k, cfg, log, counters), name=names[k])
                    for k in range(args.readers)
                ]
                with Supervisor(tasks) as procs:  # after a failure the rest wait: stop soon
                    outcomes = procs.wait(time_limit, failure_grace=FAILURE_GRACE)
        finally:
            ring.close()
        events = [] if log is None else log.events()
        _, _, dropped, folded = (0, 0, 0, 0) if log is None else log.header()
    errors = problems(outcomes)
    left = os.path.exists(os.path.join(SHM_DIR, ring.name))
    if left:
        errors.append(f"segment {ring.name} still in {SHM_DIR} after close")
    sent, *received = (o.value if o.ok else 0 for o in outcomes)
    seconds = round(time.monotonic() - start, 3)  # the run, without TLC
    trace = None
    if traced:
        trace = _validate(events, dropped, args, sent if outcomes[0].ok else None)
        trace["folded"] = folded
        if not trace["accepted"]:
            errors.append(f"trace validation: {trace['verdict']}: {trace['detail']}")
    return Summary(
        kind="ring",
        ok=not errors,
        segment=ring.name,
        segment_left=left,
        seconds=seconds,
        readers=args.readers,
        sent=sent,
        received=received,
        errors=errors,
        trace=trace,
    )


def _validate(
    events: list[Any], dropped: int, args: argparse.Namespace, sent: int | None
) -> dict[str, Any]:
    """TLC's verdict on the recorded trace, as the summary's ``trace`` entry."""
    from spec import tlc
    from verifiedring.testing.trace import validate

    info: dict[str, Any] = {"events": len(events), "dropped": dropped}
    # the END frame is the writer's last message (MaxMsgs); a writer that failed:
    # bound by the fills recorded
    fills = sum(e.action == "WriterFillPayload" for e in events)
    messages = (sent + 1) if sent is not None else max(fills, 1)
    try:
        v = validate(events, n_reader=args.readers, max_chunks=args.max_chunks, messages=messages)
    except tlc.TLCError as e:
        return {
            **info,
            "states": "?",
            "tlc_seconds": 0.0,
            "verdict": "error",
            "accepted": False,
            "detail": f"TLC cannot run here: {e}",
        }
    detail = v.reason if v.event is None else f"{v.reason}; at event {v.rejected_at}: {v.event}"
    return {
        **info,
        "states": v.states,
        "tlc_seconds": round(v.seconds, 2),
        "verdict": v.result,
        "accepted": v.accepted,
        "detail": detail,
    }


def main(args: argparse.Namespace) -> int:
    summary = run(args)
    record("ring", summary.ok, summary.received, summary.seconds)
    if args.json:
        print(json.dumps(asdict(summary)), flush=True)
    else:
        status = "ok" if summary.ok else "FAILED"
        print(
            f"stress ring: {status}: {summary.sent} messages to {summary.readers} readers "
            f"(received {summary.received}) in {summary.seconds} s, "
            f"max_chunk_bytes={args.max_chunk_bytes} max_chunks={args.max_chunks} "
            f"seed={args.seed}",
            flush=True,
        )
        if summary.trace is not None:
            t = summary.trace
            verdict = "ACCEPTED" if t["accepted"] else f"REJECTED ({t['verdict']})"
            cut = f" ({t['dropped']} steps after the cap not recorded)" if t["dropped"] else ""
            print(
                f"trace validation: {verdict}: {t['events']} events{cut}, {t['states']} "
                f"states, TLC {t['tlc_seconds']} s",
                flush=True,
            )
        for e in summary.errors:
            print(f"  {e}", file=sys.stderr)
    return 0 if summary.ok else 1
