"""One ``with`` block of a ring cursor: what ``acquire_write()`` and ``acquire_read()``
return.

A normal exit publishes the writer's chunk or releases the reader's; a raising body
leaves the writer's chunk unpublished (``WriterAbort``) and still releases the reader's.

CPython delivers an asynchronous exception (a signal handler's, KeyboardInterrupt) also
at the entry of a Python function, ``__exit__`` too, and the with-statement's exit is
then skipped whole. The lease is the with-statement's own object: nothing else refers to
it, so with its exit skipped it dies holding the chunk while that exception unwinds, and
its ``__del__`` does what the exit would have: the writer's chunk is left unpublished,
the reader's released (``spec/RingBuffer.tla``: WriterExitCut, ReaderExitCut). A lease
kept in a variable dies with the variable; until then its cursor refuses to acquire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .steps import READER_EXIT_CUT, WRITER_EXIT_CUT

if TYPE_CHECKING:
    from .cursors import ReaderCursor, WriterCursor

__all__ = ["ReadLease", "WriteLease"]


class WriteLease:
    """``with w.acquire_write() as buf:`` -- the claimed chunk's payload to fill."""

    __slots__ = ("_cursor", "_hold")

    def __init__(self, cursor: WriterCursor) -> None:
        self._cursor = cursor
        self._hold = -1  # the cursor's hold this block makes; -1 until __enter__

    def __enter__(self) -> memoryview:
        cursor = self._cursor
        self._hold = cursor.holds + 1  # first: an exception at fill()'s return finds it
        return cursor.fill()

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self._cursor.publish()
        else:
            self._cursor.abort()

    def __del__(self) -> None:
        cursor = self._cursor
        if cursor.holding and cursor.holds == self._hold:
            # spec: WriterExitCut -- this block's __exit__ never ran: unpublished, reused
            cursor.abort(WRITER_EXIT_CUT)


class ReadLease:
    """``with r.acquire_read() as buf:`` -- the published chunk, read-only by contract."""

    __slots__ = ("_cursor", "_hold")

    def __init__(self, cursor: ReaderCursor) -> None:
        self._cursor = cursor
        self._hold = -1

    def __enter__(self) -> memoryview:
        cursor = self._cursor
        self._hold = cursor.holds + 1
        return cursor.take()

    def __exit__(self, *exc: object) -> None:
        self._cursor.release()

    def __del__(self) -> None:
        cursor = self._cursor
        if cursor.holding and cursor.holds == self._hold:
            # spec: ReaderExitCut -- this block's __exit__ never ran: released all the same
            cursor.release(READER_EXIT_CUT)
