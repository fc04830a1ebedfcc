"""A local reader's taken chunk: lent to acquire_read, or left taken by an interrupt.

CPython delivers a pending signal at a function's entry and at a call's return, so
a dequeue can be cut right after its take (the message not consumed yet) or at its
release's entry (consumed; the release not begun). Both leave the chunk taken; this
is what the reader does with it then (see ``tests/test_take_interrupts.py``).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from . import wire

if TYPE_CHECKING:
    from ..cursors import ReaderCursor
    from .flavors.run.reader import RunReader

NOTHING: Any = object()  # no object was decoded


class TakenChunk:
    """The taken chunk of a local reader (part of LocalReader)."""

    if TYPE_CHECKING:  # what the reader provides
        _cursor: ReaderCursor
        _run: RunReader
        _lent: bool
        _seq: int
        _state: enum.Enum

        def _owe_delivery(self, obj: Any) -> None: ...

    def _lend(self, chunk: memoryview, header: tuple[int, int, int, int]) -> memoryview:
        """acquire_read's one-chunk message: its chunk stays taken, read in place: the
        bytes its writer stored after the header, and none past them (pages there may
        not be reserved: :mod:`verifiedring.reservation`; a RAW chunk's are all of it)."""
        self._lent = True
        return chunk[wire.HEADER_BYTES : wire.stored_bytes(chunk, header)].toreadonly()

    def _look(self) -> bool:
        """Whether the next message is at the head: the chunk held unread, else the
        ring's next (nothing consumed)."""
        cursor = self._cursor
        return self._held_unread() if cursor.holding else cursor.poll()

    def _held_unread(self) -> bool:
        """The cursor holds a chunk outside a run or a lent read: an interrupt cut the
        last dequeue right after its take (the message not consumed: read it again,
        true), or at a release's entry twice over (consumed: released now, false)."""
        if self._run.active or self._lent:
            return False
        if wire.read_header(self._cursor.held())[1] >= self._seq:
            return True
        self._cursor.release()
        return False

    def _release_taken(self, got: Any) -> None:
        """Release the taken chunk. Interrupted at the release's entry (nothing done),
        release it in the handler, so the writer does not stall on it; ``got``, the
        object decoded (unless ``NOTHING``), is then owed to the next dequeue."""
        cursor = self._cursor
        try:
            cursor.release()
        except BaseException:
            if cursor.holding:
                cursor.release()
            if got is not NOTHING:
                self._owe_delivery(got)
            raise
