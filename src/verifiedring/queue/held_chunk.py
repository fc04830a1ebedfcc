"""A local reader's taken chunk: lent to acquire_read, or left taken by an interrupt.

CPython delivers a pending signal at a function's entry and at a call's return, so
a dequeue can be cut right after its take (the message not consumed yet) or at its
release's entry (consumed; the release not begun). Both leave the chunk taken; this
is what the reader does with it then (see ``tests/test_take_interrupts.py``).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from . import wire

if TYPE_CHECKING:
    from ..cursors import ReaderCursor
    from .flavors.run.reader import RunReader


class TakenChunk:
    """The taken chunk of a local reader (part of LocalReader)."""

    if TYPE_CHECKING:  # what the reader provides
        _cursor: ReaderCursor
        _run: RunReader
        _lent: bool
        _seq: int
        _state: enum.Enum

    def _lend(self, chunk: memoryview, header: tuple[int, int, int, int]) -> memoryview:
        """acquire_read's one-chunk message: its chunk stays taken, read in place (lent
        once the view is made: a cut before leaves it an unlent, consumed chunk)."""
        view = chunk[wire.HEADER_BYTES :].toreadonly()
        self._lent = True
        return view

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

    def _release_taken(self) -> None:
        """Release the taken chunk. Interrupted at the release's entry (nothing done),
        release it in the handler, so the writer does not stall on it (the object
        decoded is owed already: its decode recorded it). Cut at this call's own
        entry, the chunk stays taken: :meth:`_held_unread` releases it next."""
        cursor = self._cursor
        try:
            cursor.release()
        except BaseException:
            if cursor.holding:
                cursor.release()
            raise
