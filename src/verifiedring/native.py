"""The native step core: the writer's common path, one INLINE chunk, as one C call.

:class:`verifiedring._steps.WriterStep` makes the loads, stores and fences of the
Python steps of :mod:`verifiedring.cursors` for a message that fits one chunk and has
no out-of-band buffer (claim's poll, fill, the encoding, the publish and the wake-up),
and the same bookkeeping (``committing``, ``index``, ``published``, ``published_at``),
in one call that runs no Python code: an asynchronous exception lands before it
(nothing done) or after it (all done), never between two of its steps. Each line of
``_steps.c`` that makes a step names it (``spec: WriterPublish``); those names are the
Python steps', in the same order (``tests/test_native_steps.py``).

The call returns False, having stored nothing, whenever the Python steps must run:
a step observer is attached (traces, the stateful machines), the cursor is closed or
holds a chunk, the chunk's pages are not reserved yet, or the chunk is not free (the
Python path waits for it). Without the C module (no compiler at install, not Linux) or
with ``VERIFIEDRING_NATIVE_STEPS=0`` in the environment at import, every message takes
the Python steps; nothing else differs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .cursors import WriterCursor

#: Set ``VERIFIEDRING_NATIVE_STEPS=0`` to run the Python steps only (A/B benches).
ENABLED = os.environ.get("VERIFIEDRING_NATIVE_STEPS", "1") != "0"


class PublishOwner(Protocol):
    """What the step stores its bookkeeping in (the queue's local transmitter)."""

    committing: tuple[int, bool, int]
    published: tuple[int, bool]
    published_at: list[float]


class InlinePublish(Protocol):
    """``(owner, seq, stream, stored)``: message ``seq``, the pickle ``stream`` (``stored``
    bytes with the header), published as one INLINE chunk, its bookkeeping stored in
    ``owner``; False if the Python steps must run (nothing was stored)."""

    def __call__(self, owner: PublishOwner, seq: int, stream: bytes, stored: int) -> bool: ...


def writer_step(cursor: WriterCursor, n_reader: int) -> InlinePublish | None:
    """``cursor``'s native one-chunk publish; None where there is none (the Python steps
    run)."""
    if not ENABLED:
        return None
    try:
        from ._steps import WriterStep
    except ImportError:
        return None
    # a builtin method: a profiler sees its call and return (tests/interrupts)
    step: InlinePublish = WriterStep(cursor, n_reader).publish
    return step
