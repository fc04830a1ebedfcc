"""Large objects streamed through the ring: one message as a *run* of chunks.

``MessageQueue(..., large_objects="stream")``. A message too large for one
chunk travels as chunks RUN_FIRST (part 0), RUN_MORE (parts 1, 2, ...) and
RUN_LAST, each with the message's ``seq`` and each a normal ring message (one
claim and one publish per chunk: ``RingBuffer.tla``'s proof holds per chunk).
Their bytes, in order, are one byte string (:mod:`..wire`)::

    u64 nbuf | nbuf u64 lengths | the buffers | the pickle stream

The writer half (:mod:`.writer`) pickles straight into chunks (:class:`Spill`
is the pickler's file: a message that fits one chunk stays in memory and is an
INLINE chunk as ever; from the first byte that does not fit, a
:class:`RunWriter` takes over: a full chunk is published and the next one
claimed). Its memory does not grow with the object beyond one chunk and the
pickler's 64 KiB frame. The reader half (:mod:`.reader`) unpickles straight out
of the chunks (:class:`RunReader` is the unpickler's file) and releases each
chunk once its bytes are consumed, so an object may be larger than the whole
ring. ``spec/queue/MessageQueue.tla`` models the run:

* ``WriterPublishRunChunk`` -- :meth:`RunWriter._publish` (FIRST, MORE, LAST);
* ``WriterAbortRun`` -- :meth:`RunWriter.abort`: pickling raised after some
  chunks were published, or an asynchronous exception (KeyboardInterrupt)
  landed mid-run: in the chunk being filled at once, or -- landed while the
  writer waited for room -- at the start of its next call (enqueue, shutdown,
  close). The ABORT chunk carries the reason; every reader raises
  :class:`~verifiedring.errors.MessageAbortedError` for that message, and
  ``seq`` is used up;
* ``ReaderReadRunChunk`` -- :meth:`RunReader._next`: the next chunk must be
  MORE, LAST or ABORT with the run's ``seq`` and the next part, else
  :class:`~verifiedring.errors.BrokenPeerError`;
* ``ReaderReleaseRunChunk`` -- :meth:`RunReader._release`, only once the
  chunk's bytes were consumed.

A reader whose unpickler raises mid-run reads and releases the rest of the run
(to its LAST or ABORT) and only then raises DecodeError: the next dequeue
starts at the next message.

**Deadlines.** The caller's timeout bounds the wait for the run's *first*
chunk (writer: room for it; reader: its publication): before it nothing is
published or consumed, so retrying is safe. Once begun, a run is completed or
aborted: the rest waits at the peers' pace, watching for a reader or the writer
that died (named, :class:`~verifiedring.errors.BrokenPeerError`) and logging
who it waits for.
"""

from __future__ import annotations

from typing import Any

from ... import wire

#: The observer's name of each run chunk kind.
KIND_OF = {
    wire.RUN_FIRST: "first", wire.RUN_MORE: "more", wire.RUN_LAST: "last",
    wire.RUN_ABORT: "abort",
}


def bytes_view(b: Any) -> memoryview:
    """``b`` (bytes, bytearray, PickleBuffer, memoryview) as a flat byte view."""
    view = memoryview(b)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")
