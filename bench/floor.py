"""floor: the minimal pure-Python shared-memory ring every figure is a ratio to.

One writer, R readers, ``slots`` slots. Slot ``k``: a uint64 sequence number
(0: never written), a uint32 length, the pickled bytes. Reader ``r``: one uint64
"consumed" counter in its own cache line. Message ``n`` (from 1) goes to slot
``n % slots`` once every reader has consumed ``n - slots``; the bytes are copied
in with one slice assignment, then the sequence number is stored. A reader waits
for its next sequence number, unpickles, stores its counter. Every failed poll
yields the CPU (``sched_yield``). No fences, no checks beyond the sequence
number, no timeouts, no failure handling: the least a ring can do in Python,
not something to use. ``python -m bench floor`` prints its round trip.
"""

from __future__ import annotations

import argparse
import os
import pickle
import struct
from multiprocessing import shared_memory
from typing import Any

_LEN = struct.Struct("<I")
LINE = 64


class FloorRing:
    """The floor ring over one shared-memory segment (create, or attach by name)."""

    def __init__(
        self, n_reader: int, slot_bytes: int, slots: int, name: str | None = None
    ) -> None:
        self.n_reader, self.slot_bytes, self.slots = n_reader, slot_bytes, slots
        self._stride = LINE * ((8 + 4 + slot_bytes + LINE - 1) // LINE)
        size = LINE * n_reader + self._stride * slots
        # Spawned readers share the creator's resource tracker: the creator unlinks.
        self.shm = shared_memory.SharedMemory(name=name, create=name is None, size=size)
        buf = self.shm.buf
        if buf is None:  # typed Optional: None only once closed
            raise RuntimeError("shared memory segment closed")
        self._buf = buf
        self._consumed = [buf[LINE * r : LINE * r + 8].cast("Q") for r in range(n_reader)]
        base = LINE * n_reader
        self._seq = [buf[base + self._stride * k : base + self._stride * k + 8].cast("Q")
                     for k in range(slots)]
        self._len = [base + self._stride * k + 8 for k in range(slots)]
        self._data = [buf[base + self._stride * k + 12 : base + self._stride * (k + 1)]
                      for k in range(slots)]
        self._n = 0

    @property
    def name(self) -> str:
        return self.shm.name

    def send(self, obj: Any) -> None:
        n = self._n + 1
        k = n % self.slots
        floor = n - self.slots
        yield_cpu = os.sched_yield
        for c in self._consumed:
            while c[0] < floor:
                yield_cpu()
        data = pickle.dumps(obj, protocol=5)
        _LEN.pack_into(self._buf, self._len[k], len(data))
        self._data[k][: len(data)] = data
        self._seq[k][0] = n
        self._n = n

    def recv(self, reader: int) -> Any:
        n = self._n + 1
        k = n % self.slots
        seq = self._seq[k]
        yield_cpu = os.sched_yield
        while seq[0] != n:
            yield_cpu()
        (size,) = _LEN.unpack_from(self._buf, self._len[k])
        obj = pickle.loads(self._data[k][:size])
        self._consumed[reader][0] = n
        self._n = n
        return obj

    def close(self, unlink: bool = False) -> None:
        for views in (self._consumed, self._seq, self._data):
            for v in views:
                v.release()
        self.shm.close()
        if unlink:
            self.shm.unlink()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=20000)


def main(args: argparse.Namespace) -> int:
    from .report import roundtrip

    p50 = roundtrip("floor", 1, 1024, args.rounds)["p50_us"]
    print(f"floor ring, 1 KiB round trip p50: {p50:.1f} us")
    return 0
