"""Progress of a long run, and the table at the end of a run of several kinds.

:class:`Counters` -- one u64 per reader in a small mapped file that each reader
process opens by path and sets to the number of messages it has checked (every
:data:`EVERY` messages and at its end); :class:`Progress` -- a thread of the parent
that prints, every ``interval`` seconds, the messages per second overall and per
reader. Each kind ends with :func:`record`; ``python -m stress`` without a kind
prints :func:`table` after the last kind.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SLOT = struct.Struct("<Q")
#: A reader updates its counter every EVERY checked messages (and at its end).
EVERY = 256


class Counters:
    """``n`` counters in a mapped file (create in the parent, :meth:`attach` in a child)."""

    def __init__(self, path: str, n: int, owner: bool) -> None:
        self.path, self.n, self._owner = path, n, owner
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), SLOT.size * n)

    @classmethod
    def create(cls, n: int) -> Counters:
        fd, path = tempfile.mkstemp(prefix="stress-progress-")
        with os.fdopen(fd, "wb") as f:
            f.write(bytes(SLOT.size * n))
        return cls(path, n, owner=True)

    @classmethod
    def attach(cls, path: str, n: int) -> Counters:
        return cls(path, n, owner=False)

    def set(self, i: int, value: int) -> None:
        SLOT.pack_into(self._map, SLOT.size * i, value)

    def read(self) -> list[int]:
        return [SLOT.unpack_from(self._map, SLOT.size * i)[0] for i in range(self.n)]

    def close(self) -> None:
        self._map.close()
        if self._owner:
            os.unlink(self.path)


class Tally:
    """A reader's side: ``note(count)`` after each checked message (cheap: it writes
    every ``every`` messages)."""

    def __init__(self, path: str | None, n: int, slot: int, every: int = EVERY) -> None:
        self._counters = Counters.attach(path, n) if path else None
        self._slot, self._every = slot, every

    def note(self, count: int) -> None:
        if self._counters is not None and count % self._every == 0:
            self._counters.set(self._slot, count)

    def close(self, count: int) -> None:
        if self._counters is not None:
            self._counters.set(self._slot, count)
            self._counters.close()


class Progress:
    """Prints ``stress KIND: T s: N checked, X msg/s; name: x msg/s ...`` every
    ``interval`` seconds while in its ``with`` block (``interval`` 0: silent)."""

    def __init__(self, kind: str, names: Sequence[str], interval: float) -> None:
        self.kind, self.names, self.interval = kind, list(names), interval
        self.counters = Counters.create(len(names))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def path(self) -> str:
        return self.counters.path

    def __enter__(self) -> Progress:
        if self.interval > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.interval + 1.0)
        self.counters.close()

    def _run(self) -> None:
        t0 = last_t = time.monotonic()
        last = self.counters.read()
        while not self._stop.wait(self.interval):
            now, counts = time.monotonic(), self.counters.read()
            dt = max(now - last_t, 1e-9)
            rates = [(c - p) / dt for c, p in zip(counts, last, strict=True)]
            each = ", ".join(f"{n} {r:,.0f}/s" for n, r in zip(self.names, rates, strict=True))
            print(f"stress {self.kind}: {now - t0:6.1f} s: {sum(counts):,d} checked, "
                  f"{sum(rates):,.0f} msg/s ({each})", file=sys.stderr, flush=True)
            last_t, last = now, counts


@dataclass(frozen=True)
class Result:
    kind: str
    ok: bool
    checked: int
    readers: int
    seconds: float


RESULTS: list[Result] = []


def record(kind: str, ok: bool, received: Sequence[int], seconds: float) -> None:
    """A finished run of ``kind``: ``received`` is what each reader checked."""
    RESULTS.append(Result(kind, ok, sum(received), len(received), seconds))


def table(results: Sequence[Result] = RESULTS) -> str:
    """One table of the runs: checked messages, readers, seconds, msg/s, status."""
    rows = [f"{'kind':8s} {'status':7s} {'checked':>12s} {'readers':>7s} {'seconds':>8s} "
            f"{'msg/s':>10s}"]
    for r in results:
        rate = r.checked / r.seconds if r.seconds > 0 else 0.0
        rows.append(f"{r.kind:8s} {'ok' if r.ok else 'FAILED':7s} {r.checked:>12,d} "
                    f"{r.readers:>7d} {r.seconds:>8.1f} {rate:>10,.0f}")
    total = sum(r.checked for r in results)
    rows.append(f"{'total':8s} {'ok' if all(r.ok for r in results) else 'FAILED':7s} "
                f"{total:>12,d}")
    return "\n".join(rows)


def interval(args: Any) -> float:
    """The progress interval of a run: ``--progress``, else 5 s on a ``--duration`` run."""
    if args.progress is not None:
        return float(args.progress)
    return 5.0 if args.duration else 0.0
