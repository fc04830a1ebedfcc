"""Memory ordering for the flag protocol: the one vocabulary used at every flag access.

The protocol needs six orderings (``spec/README.md``, "Fences"; the relaxed-memory
model ``spec/MCRelaxed*`` checks that these and no fewer suffice)::

    FW1  writer: flag loads of WriterPoll      -> every later store of the write
    FW2  writer: WriterClearWritten's store    -> payload stores
    FW3  writer: payload stores                -> WriterClearReadFlag stores
    FW4  writer: WriterClearReadFlag stores    -> WriterPublish's store
    FR1  reader: flag loads of ReaderPoll      -> payload loads
    FR2  reader: payload loads                 -> ReaderRelease's store

CPython offers no atomics, and its interpreter may be compiled for a weakly
ordered CPU (ARM, POWER) where plain stores become visible out of order and
loads may be satisfied early. x86-TSO keeps every ordering above except a
store followed by a load (none of the six), but ARM keeps none of them. So
each is enforced by :func:`fence`: an uncontended ``threading.Lock``
acquire/release. Both halves are atomic read-modify-write operations with
acquire and release semantics in every libc CPython supports (glibc's
``sem_trywait``/``sem_post`` or ``pthread_mutex``), and both are opaque calls,
so neither the C compiler nor the CPU moves a flag or payload access of this
thread across the pair. Cost: about 50-80 ns, paid a fixed number of times per
message, never per byte.

Single-byte loads and stores through a ``memoryview`` are single machine
instructions on every supported platform, so a flag never tears.
"""

from __future__ import annotations

import threading

_fence_lock = threading.Lock()
# Bound once: the hot path pays two C calls, not two attribute lookups as well.
_acquire = _fence_lock.acquire
_release = _fence_lock.release


def fence() -> None:
    """Full fence: no load or store of this thread crosses this call.

    Call sites name which of FW1..FW4 / FR1..FR2 they enforce.
    """
    _acquire()
    _release()
