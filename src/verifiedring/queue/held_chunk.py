"""A local reader's taken chunk: lent to acquire_read, or left taken by an interrupt.

CPython delivers a pending signal at a function's entry and at a call's return, so
a dequeue can be cut right after its take (the message not consumed yet) or at its
release's entry (consumed; the release not begun). Both leave the chunk taken; this
is what the reader does with it then (see ``tests/test_take_interrupts.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import wire

if TYPE_CHECKING:
    from ..cursors import ReaderCursor
    from .flavors.run.reader import RunReader
    from .lifecycle import ReaderLifecycle


class TakenChunk:
    """The taken chunk of a local reader (part of LocalReader)."""

    if TYPE_CHECKING:  # what the reader provides
        _cursor: ReaderCursor
        _run: RunReader
        _lent: bool
        _life: ReaderLifecycle
        _load_inline: Any

        def dequeue(self, timeout: float | None = None, *, cancel: Any = None,
                    indefinite: bool = False) -> Any: ...

        def _bytes_view(self, obj: Any) -> memoryview: ...

    @contextlib.contextmanager
    def acquire_read(
        self, timeout: float | None = None, indefinite: bool = False
    ) -> Iterator[memoryview]:
        """vLLM's buffer API: the next message's ring chunk in place, read-only (the
        bytes after verifiedring's header: an ``acquire_write`` body's, or the encoded
        object), with ``dequeue``'s waits, sequence check and errors. Leaving releases
        the chunk (the writer may reuse it), also when the body raises. A message that
        is not in one chunk (an overflow frame, a run) is consumed: a ``bytes`` object is
        yielded read-only, any other raises :class:`MisuseError` naming its type."""
        self._load_inline = self._lend
        try:
            got = self.dequeue(timeout, indefinite=indefinite)
        finally:
            self._load_inline = wire.load_inline
        if not self._lent:  # not in one chunk: as a remote reader's, bytes or refused
            with self._bytes_view(got) as view:
                yield view
            return
        try:
            yield got
        finally:
            self._lent = False
            try:
                self._cursor.release()
            finally:
                with contextlib.suppress(BufferError):  # the caller kept a view of it
                    got.release()

    def _lend(self, chunk: memoryview, header: tuple[int, int, int, int]) -> memoryview:
        """acquire_read's one-chunk message: its chunk stays taken, read in place: the
        bytes its writer stored after the header, and none past them (pages there may
        not be reserved: :mod:`verifiedring.reservation`; a RAW chunk's are all of it).
        Lent once the view is made: a cut before leaves it an unlent, consumed chunk."""
        view = chunk[wire.HEADER_BYTES : wire.stored_bytes(chunk, header)].toreadonly()
        self._lent = True
        return view

    def _look(self) -> bool:
        """Whether the next message is at the head: the chunk held unread, else the
        ring's next (nothing consumed)."""
        cursor = self._cursor
        return self._held_unread() if cursor.holding else cursor.poll()

    def _pay_owed(self) -> Any:
        """A consumed chunk whose release an interrupt cut is released first (else the
        writer would wait on it until this reader's next call), then what is owed."""
        if self._cursor.holding and not self._lent:
            self._held_unread()
        return super()._pay_owed()  # type: ignore[misc]

    def _held_unread(self) -> bool:
        """The cursor holds a chunk outside a run or a lent read: an interrupt cut the
        last dequeue right after its take (the message not consumed: read it again,
        true), or at a release's entry twice over (consumed: released now, false)."""
        if self._run.active or self._lent:
            return False
        if wire.read_header(self._cursor.held())[1] >= self._life.seq:
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
