"""Memory ordering for the flag protocol: the one vocabulary used at every flag access.

The protocol's orderings, one ``fence()`` call each in :mod:`verifiedring.cursors`
(``spec/ring/README.md``, "Fences", says which the relaxed-memory model shows necessary)::

    FW1  writer: the loads of WriterPollWritten/WriterPollReadFlag -> every later store
    FW2  writer: WriterClearWritten's store     -> payload stores
    FW3  writer: payload stores                 -> WriterClearReadFlag stores
    FW4  writer: WriterClearReadFlag stores     -> WriterPublish's store
    FR0  reader: ReaderPollReadFlag's load      -> ReaderPollWritten's load
    FR1  reader: ReaderPollWritten's load       -> payload loads
    FR2  reader: payload loads                  -> ReaderRelease's store
    FS1  reader: ReaderAnnounceSleep's store    -> the re-check's loads
    FS2  writer: WriterPublish's store          -> WriterCheckSleep's loads

FS1 and FS2 (the idle reader's sleep, ``spec/sleep/ReaderSleep.tla``) are the one
store -> load pair: x86 keeps every other ordering above without a barrier, but
not these (the store-buffering litmus), so there the fence is a real ``mfence``.

CPython offers no atomics, and its interpreter may run on a weakly ordered
CPU (ARM, POWER) where plain stores become visible out of order and loads
may be satisfied early. x86-TSO keeps every ordering above except a store
followed by a load (FS1, FS2), but ARM keeps none of them. So each is
enforced by :func:`fence`:

* preferred: ``verifiedring._fence.fence``, a C function that executes
  ``atomic_thread_fence(memory_order_seq_cst)``: a hardware barrier in an
  opaque call (``mfence`` or a locked instruction on x86, ``dmb ish`` on
  ARMv8), one C call. The interpreter's loads and stores
  through a memoryview are plain accesses, not C11 atomics, so what this
  gives is the hardware barrier, not a guarantee of the C11 memory model;
* fallback, only on x86, when the extension could not be built: an
  uncontended ``threading.Lock`` acquire/release, whose atomic
  read-modify-writes are locked instructions there, hence full barriers. On
  any other CPU the lock's acquire/release exclusives are not a full barrier
  (a store before the release may pass a load after the acquire on ARMv8), so
  importing this module without the C fence there raises ``ImportError``.

``FENCE_KIND`` says which one is in use. Either is an opaque call, so the C
compiler cannot move the interpreter's accesses across it.

Single-byte loads and stores through a ``memoryview`` are single machine
instructions on every supported platform, so a flag never tears.
"""

from __future__ import annotations

import platform
import threading

#: CPUs on which a lock acquire/release is a full barrier (locked instructions).
X86 = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})

try:
    from ._fence import fence as fence

    FENCE_KIND = "c11-seq-cst"
except ImportError:  # built without a C compiler
    if platform.machine().lower() not in X86:
        raise ImportError(
            f"verifiedring needs its C fence (verifiedring._fence) on {platform.machine()}: "
            "the lock fallback is a full barrier only on x86; reinstall with a C compiler "
            "available (pip install --force-reinstall verifiedring)"
        ) from None
    _fence_lock = threading.Lock()
    # Bound once: the hot path pays two C calls, not two attribute lookups as well.
    _acquire = _fence_lock.acquire
    _release = _fence_lock.release
    FENCE_KIND = "lock"

    def fence() -> None:
        """Full fence: no load or store of this thread crosses this call.

        Call sites name which of FW1..FW4 / FR0..FR2 / FS1..FS2 they enforce.
        """
        _acquire()
        _release()
