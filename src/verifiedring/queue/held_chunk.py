"""A local reader's taken chunk: lent to acquire_read, or left taken by an interrupt.

CPython delivers a pending signal at a function's entry and at a call's return, so
a dequeue can be cut right after its take (the message not consumed yet) or at its
release's entry (consumed; the release not begun). Both leave the chunk taken; this
is what the reader does with it then (see ``tests/test_take_interrupts.py``).
"""

from __future__ import annotations

from ..cursors import ReaderCursor
from . import wire
from .flavors.run.reader import RunReader
from .lifecycle import ReaderLifecycle


class TakenChunk:
    """The chunk a local reader's cursor holds outside a run: one per reader, held by
    its path (:class:`~.local_path.LocalPath`), over its cursor, lifecycle and run."""

    __slots__ = ("_cursor", "_life", "_run", "lent")

    def __init__(self, cursor: ReaderCursor, life: ReaderLifecycle, run: RunReader) -> None:
        self._cursor = cursor
        self._life = life
        self._run = run
        #: The chunk of the message just dequeued is still taken: lent to acquire_read.
        self.lent = False

    def lend(self, chunk: memoryview, header: tuple[int, int, int, int]) -> memoryview:
        """acquire_read's one-chunk message: its chunk stays taken, read in place: the
        bytes its writer stored after the header, and none past them (pages there may
        not be reserved: :mod:`verifiedring.reservation`; a RAW chunk's are all of it).
        Lent once the view is made: a cut before leaves it an unlent, consumed chunk."""
        view = chunk[wire.HEADER_BYTES : wire.stored_bytes(chunk, header)].toreadonly()
        self.lent = True
        return view

    def look(self) -> bool:
        """Whether the next message is at the head: the chunk held unread, else the
        ring's next (nothing consumed)."""
        cursor = self._cursor
        return self.held_unread() if cursor.holding else cursor.poll()

    def settle(self) -> None:
        """Before an owed outcome is paid: a consumed chunk whose release an interrupt
        cut is released first (else the writer would wait on it until this reader's
        next call)."""
        if self._cursor.holding and not self.lent:
            self.held_unread()

    def held_unread(self) -> bool:
        """The cursor holds a chunk outside a run or a lent read: an interrupt cut the
        last dequeue right after its take (the message not consumed: read it again,
        true), or at a release's entry twice over (consumed: released now, false)."""
        if self._run.active or self.lent:
            return False
        if wire.read_header(self._cursor.held())[1] >= self._life.seq:
            return True
        self._cursor.release()
        return False

    def release_taken(self) -> None:
        """Release the taken chunk. Interrupted at the release's entry (nothing done),
        release it in the handler, so the writer does not stall on it (the object
        decoded is owed already: its decode recorded it). Cut at this call's own
        entry, the chunk stays taken: :meth:`held_unread` releases it next."""
        cursor = self._cursor
        try:
            cursor.release()
        except BaseException:
            if cursor.holding:
                cursor.release()
            raise
