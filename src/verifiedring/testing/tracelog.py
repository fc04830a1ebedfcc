"""The shared event log of a traced run, and the base of the recorders that append to it.

A :class:`SharedLog` is a file mapped into every traced process, holding a header
(capacity, events recorded, steps not recorded because the log was full, failed
polls folded) and fixed-size records, plus one lock from the ``spawn`` context.
A :class:`MappedLog` is one process's view of it: a recorder (the ring's
:class:`~verifiedring.testing.trace.TraceRecorder`, the queue's
:class:`~verifiedring.testing.queue_trace.QueueRecorder`) takes the lock where a
step begins (:meth:`MappedLog.enter`) and appends the step's record and releases
it where the step ends, so no two traced steps overlap and the log's order is the
order the steps happened in. Once the log is full, recording stops, and so does
the locking; the run goes on.
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from ..errors import MisuseError

#: capacity, events recorded, steps not recorded (log full), repeated failed polls folded
HEADER = struct.Struct("<QQQQ")
LOCK_TIMEOUT = 30.0  # seconds a step waits for the trace lock before it fails


_Log = TypeVar("_Log", bound="SharedLog")


class TraceError(RuntimeError):
    """The trace could not be recorded (the lock was held too long: a traced
    process died inside a step)."""


@dataclass
class SharedLog:
    """The shared event log of one traced run: a mapped file and one lock.

    Picklable while spawning, so it travels in a :class:`~.launcher.Task`'s
    arguments. Create it with :meth:`create` (the lock must come from the
    ``spawn`` context), read it with :meth:`records` once the run is over. Each
    kind of trace is a subclass naming its :attr:`RECORD`.
    """

    RECORD: ClassVar[struct.Struct]

    path: str
    capacity: int
    lock: Any = field(repr=False)

    @classmethod
    def create(cls: type[_Log], directory: str | os.PathLike[str], capacity: int) -> _Log:
        """An empty log of ``capacity`` records, in a file in ``directory``."""
        if capacity < 1:
            raise MisuseError(f"trace capacity must be >= 1 event, got {capacity}")
        path = os.path.join(os.fspath(directory), "trace.bin")
        with open(path, "wb") as f:
            f.truncate(HEADER.size + capacity * cls.RECORD.size)
            f.seek(0)
            f.write(HEADER.pack(capacity, 0, 0, 0))
        return cls(path, capacity, mp.get_context("spawn").Lock())

    def records(self) -> list[tuple[Any, ...]]:
        """The recorded records, in order, unpacked."""
        with open(self.path, "rb") as f:
            data = f.read()
        _, count, _, _ = HEADER.unpack_from(data, 0)
        size = self.RECORD.size
        return [
            self.RECORD.unpack_from(data, HEADER.size + n * size) for n in range(count)
        ]

    def header(self) -> tuple[int, int, int, int]:
        """(capacity, events recorded, steps not recorded, failed-poll events folded)."""
        with open(self.path, "rb") as f:
            return HEADER.unpack(f.read(HEADER.size))


class MappedLog:
    """One process's mapping of a :class:`SharedLog`: the lock, the header, the records.

    :meth:`enter` takes the lock (or tells that the log is full); the caller then
    appends with :meth:`append` (or folds with :meth:`set_counts`) and always
    calls :meth:`leave`. :meth:`close` releases a lock left held, so a step that
    never ended never leaves the other processes blocked.
    """

    def __init__(self, log: SharedLog, lock_timeout: float = LOCK_TIMEOUT) -> None:
        self._file = open(log.path, "r+b")  # noqa: SIM115 -- closed in close()
        self._map = mmap.mmap(self._file.fileno(), 0)
        self._lock = log.lock
        self._capacity = log.capacity
        self._size = log.RECORD.size
        self._timeout = lock_timeout
        self._full = False
        self._locked = False

    def enter(self, what: str) -> bool:
        """Take the lock for the step ``what``; False (lock not kept) once the log is full."""
        if self._full:
            return False
        if not self._lock.acquire(timeout=self._timeout):
            raise TraceError(f"{what}: the trace lock was not free within {self._timeout:g} s")
        count, dropped, folded = self.counts()
        if count >= self._capacity:
            self._full = True
            self.set_counts(count, dropped + 1, folded)
            self._lock.release()
            return False
        self._locked = True
        return True

    def counts(self) -> tuple[int, int, int]:
        """(events recorded, steps not recorded, failed polls folded)."""
        _, count, dropped, folded = HEADER.unpack_from(self._map, 0)
        return count, dropped, folded

    def set_counts(self, count: int, dropped: int, folded: int) -> None:
        HEADER.pack_into(self._map, 0, self._capacity, count, dropped, folded)

    def record(self, n: int) -> bytes:
        start = HEADER.size + n * self._size
        return self._map[start : start + self._size]

    def append(self, record: bytes) -> None:
        """Write ``record`` after the last one, then count it (the count last: a
        process killed mid-record leaves no half event)."""
        count, dropped, folded = self.counts()
        start = HEADER.size + count * self._size
        self._map[start : start + self._size] = record
        self.set_counts(count + 1, dropped, folded)

    def leave(self) -> None:
        """Release the lock :meth:`enter` took."""
        self._locked = False
        self._lock.release()

    def close(self) -> None:
        if self._locked:
            self.leave()
        self._map.close()
        self._file.close()
