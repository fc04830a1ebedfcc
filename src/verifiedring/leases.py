"""One ``with`` block of a ring cursor: what ``acquire_write()`` and ``acquire_read()``
return.

A normal exit publishes the writer's chunk or releases the reader's; a raising body
leaves the writer's chunk unpublished (``WriterAbort``) and still releases the reader's.

CPython delivers an asynchronous exception (a signal handler's, KeyboardInterrupt) also
at the entry of a Python function, ``__exit__`` too, and the with-statement's exit is
then skipped whole. The lease is the with-statement's own object: nothing else refers to
it, so with its exit skipped it dies holding the chunk while that exception unwinds, and
its ``__del__`` does what the exit would have: the writer's chunk is left unpublished,
the reader's released (``spec/ring/RingBuffer.tla``: WriterExitCut, ReaderExitCut). A lease
kept in a variable dies with the variable; until then its cursor refuses to acquire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .steps import READER_EXIT_CUT, WRITER_EXIT_CUT

if TYPE_CHECKING:
    from .cursor_base import Cursor
    from .cursors import ReaderCursor, WriterCursor

__all__ = ["ReadLease", "WriteLease"]


class _Lease:
    """What both leases share: the cursor, and which of its holds this block made."""

    __slots__ = ("_cursor", "_hold")
    _cursor: Cursor

    def __init__(self, cursor: Cursor) -> None:
        self._cursor = cursor
        self._hold = -1  # the cursor's hold this block makes; -1 until __enter__

    def _begin(self) -> None:
        """Name the hold the cursor's fill or take is about to make: first, so an
        exception at that call's return still finds it."""
        self._hold = self._cursor.holds + 1

    def _left_holding(self) -> bool:
        """Whether this block's hold is still on: its exit never ran."""
        cursor = self._cursor
        return cursor.holding and cursor.holds == self._hold


class WriteLease(_Lease):
    """``with w.acquire_write() as buf:`` -- the claimed chunk's payload to fill."""

    __slots__ = ()
    _cursor: WriterCursor

    def __enter__(self) -> memoryview:
        self._begin()
        return self._cursor.fill()

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self._cursor.publish()
        else:
            self._cursor.abort()

    def __del__(self) -> None:
        if self._left_holding():
            # spec: WriterExitCut -- this block's __exit__ never ran: unpublished, reused
            self._cursor.abort(WRITER_EXIT_CUT)


class ReadLease(_Lease):
    """``with r.acquire_read() as buf:`` -- the published chunk, read-only by contract."""

    __slots__ = ()
    _cursor: ReaderCursor

    def __enter__(self) -> memoryview:
        self._begin()
        return self._cursor.take()

    def __exit__(self, *exc: object) -> None:
        self._cursor.release()

    def __del__(self) -> None:
        if self._left_holding():
            # spec: ReaderExitCut -- this block's __exit__ never ran: released all the same
            self._cursor.release(READER_EXIT_CUT)
