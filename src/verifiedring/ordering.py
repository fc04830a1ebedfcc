"""Memory ordering for the flag protocol: the one vocabulary used at every flag access.

The protocol needs six orderings (``spec/README.md``, "Fences"; the relaxed-memory
model ``spec/MCRelaxed*`` checks that these and no fewer suffice)::

    FW1  writer: flag loads of WriterPoll      -> every later store of the write
    FW2  writer: WriterClearWritten's store    -> payload stores
    FW3  writer: payload stores                -> WriterClearReadFlag stores
    FW4  writer: WriterClearReadFlag stores    -> WriterPublish's store
    FR1  reader: flag loads of ReaderPoll      -> payload loads
    FR2  reader: payload loads                 -> ReaderRelease's store

CPython offers no atomics, and its interpreter may run on a weakly ordered
CPU (ARM, POWER) where plain stores become visible out of order and loads
may be satisfied early. x86-TSO keeps every ordering above except a store
followed by a load (none of the six), but ARM keeps none of them. So each is
enforced by :func:`fence`:

* preferred: ``verifiedring._fence.fence``, a C call of
  ``atomic_thread_fence(memory_order_seq_cst)`` -- a full barrier by the C11
  standard on every platform (about 40 ns with the call);
* fallback, when the extension could not be built: an uncontended
  ``threading.Lock`` acquire/release. Both halves are atomic read-modify-write
  operations (acquire, then release) in every libc CPython supports; on x86
  each is a locked instruction, hence a full barrier; on ARMv8 they are
  load-acquire/store-release exclusives, which order the accesses this
  protocol needs in practice but are weaker than a seq_cst fence in the C11
  model. ``FENCE_KIND`` says which one is in use.

Either is an opaque call, so the C compiler cannot move the interpreter's
memoryview loads and stores across it.

Single-byte loads and stores through a ``memoryview`` are single machine
instructions on every supported platform, so a flag never tears.
"""

from __future__ import annotations

import threading

try:
    from ._fence import fence as fence

    FENCE_KIND = "c11-seq-cst"
except ImportError:  # built without a C compiler
    _fence_lock = threading.Lock()
    # Bound once: the hot path pays two C calls, not two attribute lookups as well.
    _acquire = _fence_lock.acquire
    _release = _fence_lock.release
    FENCE_KIND = "lock"

    def fence() -> None:
        """Full fence: no load or store of this thread crosses this call.

        Call sites name which of FW1..FW4 / FR1..FR2 they enforce.
        """
        _acquire()
        _release()
