"""The scenarios and their oracle.

Each scenario builds a writer and its readers in one process, and plays messages
m0..m3: m0 goes through untouched; the armed phase sends m1 and every reader takes
it (one interrupt lands somewhere in there); then m2 and m3 are sent and every
reader takes what is left. The race scenarios instead arm ``close()`` or
``shutdown()`` while another thread of the process is blocked in a ``dequeue``.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from verifiedring import (
    BrokenPeerError,
    CancelledError,
    ClosedError,
    DecodeError,
    MessageQueue,
    MisuseError,
    RingTimeoutError,
)
from verifiedring.testing.blocked import wait_blocked
from verifiedring.testing.faults import arena_of

from .points import Hook

LOOPBACK = "127.0.0.1"
T = 3.0  # a bound on what must come: past it, the reader is wedged
LABELS = ("m0", "m1", "m2", "m3")
REPORTED = "reported"  # a DecodeError or MessageAbortedError: one message, consumed
BROKEN = "broken"  # BrokenPeerError: the writer is broken, this reader told

Ends = tuple[MessageQueue, list[MessageQueue]]


def _ends(n_local: int, n_remote: int = 0, **kw: Any) -> Ends:
    w = MessageQueue(n_local + n_remote, n_local, list(range(n_local)),
                     connect_ip=LOOPBACK if n_remote else None, **kw)
    h = w.export_handle()
    readers = [MessageQueue.create_from_handle(h, r) for r in range(n_local + n_remote)]
    w.wait_until_ready(T)
    for r in readers:
        r.wait_until_ready(T)
    return w, readers


def _send(w: MessageQueue, obj: Any, timeout: float) -> None:
    w.enqueue(obj, timeout=timeout)


def _receive(r: MessageQueue, timeout: float) -> Any:
    return r.dequeue(timeout=timeout)


def _write_in_place(w: MessageQueue, obj: Any, timeout: float) -> None:
    with w.acquire_write(timeout) as buf:
        buf[:2] = obj


#: What an acquire_read body saw: delivered, even if the with-statement's exit then raises.
_BODY_SAW: list[str] = []


def _read_in_place(r: MessageQueue, timeout: float) -> Any:
    with r.acquire_read(timeout) as buf:
        _BODY_SAW.append(bytes(buf[:2]).decode())
        return _BODY_SAW[-1]


@dataclass(frozen=True)
class Scenario:
    """``make(i)`` is message i; ``label`` tells a received one back."""

    name: str
    build: Callable[[], Ends]
    make: Callable[[int], Any] = LABELS.__getitem__
    label: Callable[[Any], str] = str
    send: Callable[[MessageQueue, Any, float], None] = _send
    receive: Callable[[MessageQueue, float], Any] = _receive
    race: Callable[[Ends, Hook], list[str]] | None = None
    #: Its points are pairs: a first interrupt, then one in the cut end's next call.
    second: bool = False
    #: > 0: each point is tried with a second interrupt at each of the first ``nested``
    #: library function entries after it (in the first one's handling).
    nested: int = 0
    #: m1, m2 and m3 each sent and then taken by every reader before the next is sent
    #: (a ring of one chunk cannot hold two)
    lockstep: bool = False
    #: What must hold once every reader took everything and closed (the writer open).
    after: Callable[[Ends], list[str]] | None = None


def _big(size: int) -> Callable[[int], Any]:
    return lambda i: LABELS[i].encode() + bytes(size)


def _big_label(obj: Any) -> str:
    return bytes(obj[:2]).decode() if isinstance(obj, bytes) and len(obj) > 2 else repr(obj)[:40]


def _tensor(i: int) -> Any:
    import torch

    t = torch.zeros(2 * 1024 * 1024, dtype=torch.int32)  # 8 MiB: the arena's least
    t[0] = i
    return {"m": LABELS[i], "t": t}


def _tensor_label(obj: Any) -> str:
    if isinstance(obj, dict) and LABELS.index(obj["m"]) == int(obj["t"][0]):
        return str(obj["m"])
    return repr(obj)[:40]


@dataclass
class Play:
    """What one run saw: the writer's calls after m0, each reader's outcomes."""

    writer: list[str] = field(default_factory=list)
    readers: list[list[str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _outcome(e: BaseException) -> str:
    if isinstance(e, DecodeError):  # MessageAbortedError among them
        return REPORTED
    if isinstance(e, BrokenPeerError):
        return BROKEN
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    if isinstance(e, RingTimeoutError):
        return "timeout"
    if isinstance(e, MisuseError):
        return f"MisuseError: {e}"[:160]
    return f"{type(e).__name__}: {e}"[:160]


def _call(f: Callable[[], Any]) -> tuple[Any, str | None]:
    try:
        return f(), None
    except (Exception, KeyboardInterrupt) as e:
        return None, _outcome(e)


def _next_call(hook: Hook, cut: bool) -> Any:
    """The armed phase's second hook around the cut end's next call, else nothing."""
    second = hook.second
    return second.armed() if cut and second is not None else contextlib.nullcontext()


def _take(s: Scenario, r: MessageQueue, out: list[str], hook: Hook | None = None) -> None:
    _BODY_SAW.clear()
    with _next_call(hook or Hook(), hook is not None):
        got, err = _call(lambda: s.label(s.receive(r, T)))
    if err is not None and _BODY_SAW:  # the body had the message: the exit raised
        out.append(_BODY_SAW[0])
    out.append(err or got)


def _m0(s: Scenario, w: MessageQueue, readers: list[MessageQueue], p: Play) -> None:
    """m0 sent and taken by every reader, untouched."""
    s.send(w, s.make(0), T)
    for r in readers:
        got = s.label(s.receive(r, T))
        if got != "m0":
            p.errors.append(f"m0 came as {got}")


def _deliveries(s: Scenario, w: MessageQueue, readers: list[MessageQueue], p: Play,
                hook: Hook) -> None:
    """m0 untouched; m1 sent and taken under ``hook``; then m2 and m3, and the rest."""
    _m0(s, w, readers, p)
    with hook.armed():
        _, cut = _call(lambda: s.send(w, s.make(1), T))
        p.writer.append(cut or "m1")
        # a writer cut owes its next call what it left (a run's ABORT): the readers
        # take m1 after m2 and m3 are sent (here, in one thread)
        if cut is None:
            for r, out in zip(readers, p.readers, strict=True):
                _take(s, r, out)
    for i in (2, 3):
        with _next_call(hook, i == 2 and cut is not None):
            _, err = _call(lambda i=i: s.send(w, s.make(i), T))  # type: ignore[misc]
        p.writer.append(err or LABELS[i])
    for r, out in zip(readers, p.readers, strict=True):
        was_cut = out == ["interrupted"]
        for k in range(6):
            if out and out[-1] not in (REPORTED, "interrupted", "m1", "m2"):
                break
            _take(s, r, out, hook if was_cut and k == 0 else None)


def _drain(s: Scenario, readers: list[MessageQueue], p: Play, hook: Hook) -> None:
    """Each reader takes while a message (or what a cut left it owing) is readable: all
    a send put out, which may be nothing (a cut send). A reader that was cut takes
    first under ``hook``'s second arming (its next call)."""
    for r, out in zip(readers, p.readers, strict=True):
        first = True
        while (not out or out[-1] != BROKEN) and r.readable():
            _take(s, r, out, hook if first and out == ["interrupted"] else None)
            first = False


def _lockstep(s: Scenario, w: MessageQueue, readers: list[MessageQueue], p: Play,
              hook: Hook) -> None:
    """m0 untouched; then m1 (under ``hook``), m2 and m3, each sent and then taken by
    every reader before the next is sent."""
    _m0(s, w, readers, p)
    with hook.armed():
        _, cut = _call(lambda: s.send(w, s.make(1), T))
        p.writer.append(cut or "m1")
        if cut is None:
            for r, out in zip(readers, p.readers, strict=True):
                _take(s, r, out)
    _drain(s, readers, p, hook)
    for i in (2, 3):
        with _next_call(hook, i == 2 and cut is not None):
            _, err = _call(lambda i=i: s.send(w, s.make(i), T))  # type: ignore[misc]
        p.writer.append(err or LABELS[i])
        _drain(s, readers, p, hook)


def play(s: Scenario, hook: Hook) -> Play:
    """Run scenario ``s`` with ``hook`` armed over its middle phase."""
    ends = s.build()
    w, readers = ends
    p = Play(readers=[[] for _ in readers])
    try:
        if s.race is not None:
            p.errors += s.race(ends, hook)
        elif s.lockstep:
            _lockstep(s, w, readers, p, hook)
        else:
            _deliveries(s, w, readers, p, hook)
        if s.after is not None:
            for r in readers:
                _call(r.close)
            gc.collect()
            p.errors += s.after(ends)
    finally:
        for q in (*readers, w):
            _, err = _call(q.close)
            if err is not None:
                p.errors.append(f"close() raised {err}")
    return p


def _sequences(sent: list[str], optional: set[str]) -> set[tuple[str, ...]]:
    """Every allowed delivery of ``sent``: each message or its report, in order; one
    in ``optional`` may also be missing (its send was interrupted before it went out)."""
    seqs: set[tuple[str, ...]] = {()}
    for m in sent:
        grown = {(*q, t) for q in seqs for t in (m, REPORTED)}
        seqs = grown | seqs if m in optional else grown
    return seqs


def _reader_ok(out: list[str], seqs: set[tuple[str, ...]], broken: bool) -> bool:
    """One reader's outcomes: an allowed sequence (the interrupts dropped from it); or,
    the writer broken, a prefix of one and then BrokenPeerError."""
    if out.count("interrupted") > 2:
        return False
    body = tuple(x for x in out if x != "interrupted")
    if body and body[-1] == BROKEN:
        return broken and any(q[:len(body) - 1] == body[:-1] for q in seqs)
    return body in seqs and not broken


def judge(p: Play) -> str | None:
    """The oracle: ``None`` if every reader got each message exactly once or its report
    exactly once, in order, or the writer is broken and every reader told after a
    prefix of that; else what went wrong."""
    if p.errors:
        return "; ".join(p.errors)
    if not p.writer:  # a race scenario: its own checks
        return None
    if any(m not in (*LABELS, BROKEN, "interrupted") for m in p.writer):
        return f"the writer after the interrupt: {p.writer}"
    # a send cut may or may not have gone out; a refused one (BROKEN) did not
    sent = [LABELS[i] for i, m in enumerate(p.writer, 1) if m != BROKEN or i == 1]
    cut = {LABELS[i] for i, m in enumerate(p.writer, 1) if m != LABELS[i]}
    seqs = _sequences(sent, cut)
    broken = BROKEN in p.writer
    for i, out in enumerate(p.readers):
        if not _reader_ok(out, seqs, broken):
            return f"reader {i}: {out} (writer: {p.writer})"
    return None


# -- the race scenarios: close() and shutdown() while a dequeue is blocked ----------


def _blocked_reader(r: MessageQueue, out: list[str]) -> threading.Thread:
    def body() -> None:
        _, err = _call(lambda: r.dequeue(timeout=T))
        out.append(err or "a message")

    t = threading.Thread(target=body, name="blocked-dequeue", daemon=True)
    t.start()
    wait_blocked(t, T)
    return t


def _close_race(ends: Ends, hook: Hook) -> list[str]:
    """The writer's close() while its reader is blocked in dequeue: the reader is told
    (ClosedError), the close completes (again, if cut)."""
    w, (r,) = ends
    out: list[str] = []
    t = _blocked_reader(r, out)
    with hook.armed():
        _, cut = _call(w.close)
    _, err = _call(w.close)
    t.join(T + 1)
    errors = [f"close() again: {err}"] if err else []
    if len(out) != 1 or not out[0].startswith(ClosedError.__name__):
        errors.append(f"the blocked reader after close() (cut: {cut}): {out}")
    return errors


def _shutdown_race(ends: Ends, hook: Hook) -> list[str]:
    """A reader's shutdown() while its dequeue is blocked in another thread: that
    dequeue is cancelled; a message published afterwards is still returned."""
    w, (r,) = ends
    out: list[str] = []
    t = _blocked_reader(r, out)
    with hook.armed():
        _, cut = _call(r.shutdown)
    _, err = _call(r.shutdown)
    t.join(T + 1)
    errors = [f"shutdown() again: {err}"] if err else []
    if not out or not out[0].startswith(CancelledError.__name__):
        errors.append(f"the blocked dequeue after shutdown() (cut: {cut}): {out}")
    w.enqueue("m2", timeout=T)
    got, err = _call(lambda: r.dequeue(timeout=T))
    if got != "m2":
        errors.append(f"the dequeue after shutdown(): {err or got}")
    return errors


def _arena_released(ends: Ends) -> list[str]:
    """Every slot of the writer's arena owed by no reader (each view is gone and every
    reader closed): a release cut in a view's finalizer would leave its slot owed."""
    arena = arena_of(ends[0])
    assert arena is not None
    return [f"arena slot {slot} still owed by reader(s) "
            f"{[i for i, b in enumerate(arena.owes(slot)) if b]}"
            for slot in range(arena.handle.n_slots) if any(arena.owes(slot))]


_STREAM = 10_000  # a run of three 4 KiB chunks
_FRAME = 10_000  # an overflow frame past a 4 KiB chunk

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("inline", lambda: _ends(2, max_chunk_bytes=4096, max_chunks=8)),
    Scenario("overflow", lambda: _ends(1, max_chunk_bytes=4096, max_chunks=8),
             make=_big(_FRAME), label=_big_label),
    Scenario("stream", lambda: _ends(1, max_chunk_bytes=4096, max_chunks=16,
                                     large_objects="stream"),
             make=_big(_STREAM), label=_big_label),
    Scenario("arena", lambda: _ends(1, max_chunk_bytes=4096, max_chunks=8,
                                    enable_shm_tensor_arena=True, arena_slots=4,
                                    arena_slot_bytes=9 * 1024 * 1024),
             make=_tensor, label=_tensor_label, after=_arena_released),
    Scenario("remote", lambda: _ends(1, 1, max_chunk_bytes=4096, max_chunks=8)),
    Scenario("in_place", lambda: _ends(1, max_chunk_bytes=4096, max_chunks=8),
             make=lambda i: LABELS[i].encode(), send=_write_in_place, receive=_read_in_place),
    Scenario("second", lambda: _ends(1, max_chunk_bytes=4096, max_chunks=16,
                                     large_objects="stream"),
             make=_big(_STREAM), label=_big_label, second=True),
    Scenario("stream_remote", lambda: _ends(1, 1, max_chunk_bytes=4096, max_chunks=16,
                                            large_objects="stream"),
             make=_big(_STREAM), label=_big_label),
    Scenario("one_chunk", lambda: _ends(2, max_chunk_bytes=4096, max_chunks=1),
             lockstep=True),
    Scenario("nested_inline", lambda: _ends(1, max_chunk_bytes=4096, max_chunks=8),
             nested=3),
    Scenario("nested_stream", lambda: _ends(1, max_chunk_bytes=4096, max_chunks=16,
                                            large_objects="stream"),
             make=_big(_STREAM), label=_big_label, nested=3),
    Scenario("close_race", lambda: _ends(1, max_chunk_bytes=4096, max_chunks=8),
             race=_close_race),
    Scenario("shutdown_race", lambda: _ends(1, max_chunk_bytes=4096, max_chunks=8),
             race=_shutdown_race),
)}

