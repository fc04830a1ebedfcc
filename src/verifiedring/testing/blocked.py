"""``wait_blocked``: return once the other side of a test is observably inside its wait.

A test that needs "the other side is now blocked" (a reader waiting for the next
message, a writer waiting for room) waits for that state instead of sleeping
(trio's ``wait_all_tasks_blocked``). What counts as blocked, by what is waited on:

* a :class:`threading.Thread` of this process (:class:`ThreadInWait`): its Python
  stack is inside one of the library's two waits (:func:`~verifiedring.waiting.wait_for`,
  :func:`~verifiedring.waiting.wait_readable`, entered only after a poll that
  failed), and the kernel has it asleep (not spinning, not running);
* a ring reader, in this process or another (:class:`ReaderAsleep`): its sleep word
  is 1 (it announced its sleep: it is between ReaderAnnounceSleep and ReaderEndSleep,
  ``spec/sleep/ReaderSleep.tla``) and, given its process id, that process's main thread
  is asleep in the kernel.

The state must be seen twice in a row, ``SETTLE`` apart, and for a thread in the same
wait call both times, so a wait that ends between two looks does not count.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
import time
from types import FrameType
from typing import Protocol

from ..errors import MisuseError
from ..ring import RingHandle, ShmRingBuffer
from ..shm import SharedSegment
from ..waiting import SLEEP_KIND, wait_for, wait_readable

__all__ = ["Blocker", "ReaderAsleep", "ThreadInWait", "wait_blocked"]

SETTLE = 0.01  # seconds between the two looks that must agree
_WAITS = (wait_for.__code__, wait_readable.__code__)
_WORD = struct.Struct("=I")


class Blocker(Protocol):
    """Something :func:`wait_blocked` can watch; ``str()`` names it in errors."""

    def state(self) -> object | None:
        """A token of the wait it is in now (equal tokens: the same wait), or
        ``None`` if it is not blocked."""
        ...


def _asleep_in_kernel(pid: int, tid: int) -> bool:
    """Whether thread ``tid`` of process ``pid`` sleeps (state S or D); true where
    ``/proc`` cannot tell."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("S", "D")
    except OSError:
        return not os.path.isdir("/proc/self/task")
    except IndexError:
        return False


def _task_id(thread: threading.Thread) -> int | None:
    """The kernel's id of live ``thread``: its ``native_id``, except for the thread that
    forked this process, which keeps its parent's id (CPython 3.11 does not renew it)
    while its task is the process itself."""
    tid = thread.native_id
    pid = os.getpid()
    if tid is None or tid == pid or not os.path.isdir("/proc/self/task"):
        return tid
    return tid if os.path.isdir(f"/proc/self/task/{tid}") else pid


class ThreadInWait:
    """``thread`` is inside a library wait and asleep in the kernel."""

    def __init__(self, thread: threading.Thread) -> None:
        if thread.ident is None:
            raise MisuseError(f"wait_blocked: {thread.name} is not started")
        self.thread = thread

    def state(self) -> object | None:
        thread = self.thread
        if not thread.is_alive():
            raise RuntimeError(f"wait_blocked: {thread.name} ended without blocking")
        frame: FrameType | None = sys._current_frames().get(thread.ident or 0)
        while frame is not None and frame.f_code not in _WAITS:
            frame = frame.f_back
        tid = _task_id(thread)
        if frame is None or tid is None:
            return None
        return id(frame) if _asleep_in_kernel(os.getpid(), tid) else None

    def __str__(self) -> str:
        return f"thread {self.thread.name!r} inside a wait_for / wait_readable"


class ReaderAsleep:
    """Reader ``reader`` of a ring announced its sleep (its sleep word is 1); with
    ``pid``, that process's main thread also sleeps in the kernel.

    ``ring`` is the ring (any role) or its handle. Needs the futex
    (``SLEEP_KIND == "futex"``) and a reader that sleeps on it (``wake_on_publish``).
    """

    def __init__(
        self, ring: ShmRingBuffer | RingHandle, reader: int, pid: int | None = None
    ) -> None:
        if SLEEP_KIND != "futex":
            raise MisuseError(f"wait_blocked: readers do not sleep on a word here ({SLEEP_KIND})")
        handle = ring.handle() if isinstance(ring, ShmRingBuffer) else ring
        if not 0 <= reader < handle.n_reader:
            raise MisuseError(f"wait_blocked: no reader {reader} in ring {handle.name!r}")
        self.reader = reader
        self.pid = pid
        self._handle = handle

    def state(self) -> object | None:
        h = self._handle
        seg = SharedSegment.attach(h.name, h.layout.total_bytes)
        try:
            (word,) = _WORD.unpack_from(seg.buf, h.layout.sleep_offset(self.reader))
        finally:
            seg.close()
        if word != 1:
            return None
        pid = self.pid
        return True if pid is None or _asleep_in_kernel(pid, pid) else None

    def __str__(self) -> str:
        who = "" if self.pid is None else f" (pid {self.pid})"
        return f"reader {self.reader}{who} of ring {self._handle.name!r} asleep on its word"


def wait_blocked(end: threading.Thread | Blocker, timeout: float = 10.0) -> None:
    """Return once ``end`` is blocked in its wait (see the module docstring): a thread
    (:class:`ThreadInWait`), or any :class:`Blocker` (:class:`ReaderAsleep`).

    Raises :class:`TimeoutError` naming what it waited for if that is not seen within
    ``timeout`` seconds; :class:`RuntimeError` at once if the thread ends meanwhile."""
    blocker = ThreadInWait(end) if isinstance(end, threading.Thread) else end
    deadline = time.monotonic() + timeout
    last: object | None = None
    while True:
        now = blocker.state()
        if now is not None and now == last:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"wait_blocked: {blocker} was not seen blocked within {timeout:g} s")
        last = now
        time.sleep(SETTLE)
