"""ShmRingBuffer: one writer, ``n_reader`` readers, a fixed ring of chunks.

The segment's bytes are :mod:`verifiedring.layout`'s; the protocol, step by
step beside ``spec/ring/RingBuffer.tla``, is :mod:`verifiedring.cursors`'s. An
instance plays one role and hands out that role's cursor. The segment is
created under a room policy (:mod:`verifiedring.reservation`): by default sparse
but for its metadata and each chunk's first page, the writer reserving the rest
as its writes reach it; ``reserve="all"``, backed whole at create.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .cursor_base import RingViews
from .cursors import ReaderCursor, WriterCursor
from .errors import ClosedError, MisuseError
from .layout import RingLayout
from .reservation import PageReserver, committed_at_create, reserve_policy, room_at_create
from .shm import SharedSegment
from .steps import STEP_OBSERVER_METHODS, StepObserver, require_observer
from .waiting import DEFAULT_LOG_INTERVAL

__all__ = ["ReaderCursor", "RingHandle", "RingViews", "ShmRingBuffer", "WriterCursor",
           "claimed_roles"]

#: Roles claimed in this process, per segment: (segment name, reader index) for a
#: reader, (segment name, None) for the writer. Two cursors of one role on one
#: segment in one process would break the single-writer / own-flag rules.
claimed_roles: set[tuple[str, int | None]] = set()


@dataclass(frozen=True)
class RingHandle(tuple[int, int, int, str]):
    """Everything another process needs to attach to a ring (picklable). A tuple in
    vLLM's order (``isinstance(h, tuple)``, as vLLM's handle), so ``ShmRingBuffer(*handle)``
    attaches; a frozen dataclass too (``dataclasses.replace`` works)."""

    n_reader: int
    max_chunk_bytes: int
    max_chunks: int
    name: str

    def __new__(cls, n_reader: int, max_chunk_bytes: int, max_chunks: int,
                name: str) -> RingHandle:
        return super().__new__(cls, (n_reader, max_chunk_bytes, max_chunks, name))

    def __getnewargs__(self) -> tuple[int, int, int, str]:  # pickle: __new__'s arguments
        return self.n_reader, self.max_chunk_bytes, self.max_chunks, self.name

    @property
    def layout(self) -> RingLayout:
        return RingLayout(self.n_reader, self.max_chunk_bytes, self.max_chunks)


class ShmRingBuffer:
    """A shared-memory ring of ``max_chunks`` chunks of ``max_chunk_bytes`` each.

    The creator (no ``name``, or ``create=True``) owns the segment: its :meth:`close`
    unlinks it. An attacher (a ``name``, as vLLM's ``ShmRingBuffer(*handle)``, or
    :meth:`attach`) only unmaps.
    One instance plays one role: it hands out either the writer cursor or
    reader cursors, never both.
    """

    def __init__(
        self,
        n_reader: int,
        max_chunk_bytes: int,
        max_chunks: int,
        name: str | None = None,
        create: bool | None = None,
        *,
        reserve: str | None = None,
    ) -> None:
        """``reserve``: the room policy of a created segment, ``"pages"`` or ``"all"``
        (default: ``$VERIFIEDRING_SHM_RESERVE``, else ``"pages"``; see
        :mod:`verifiedring.reservation`). An attacher reserves as ``"pages"`` does:
        backing pages already backed changes nothing."""
        self.layout = RingLayout(n_reader, max_chunk_bytes, max_chunks)
        policy = reserve_policy(reserve)
        if create is None:  # vLLM's rule: a name attaches, no name creates
            create = name is None
        if create:
            self._segment = SharedSegment.create(
                self.layout.total_bytes, name, committed_at_create(self.layout, policy),
                room=room_at_create(self.layout, policy),
            )
            self._reserve = policy
        elif name is None:
            raise MisuseError("attaching to a ring (create=False) needs the segment name")
        else:
            self._segment = SharedSegment.attach(name, self.layout.total_bytes)
            self._reserve = "pages"
        #: The segment's views, made once and handed to each cursor (:class:`RingViews`).
        self.views = RingViews.over(self._segment.buf, self.layout, self._segment.name)
        #: Each reader's sleep word as an address, for the futex (empty without one).
        self.sleep_addresses: tuple[int, ...] = self.views.sleep_addresses
        self._cursors: list[WriterCursor | ReaderCursor] = []
        self._claims: list[tuple[str, int | None]] = []  # this instance's claimed_roles
        self._role: str | None = None

    @classmethod
    def attach(cls, handle: RingHandle) -> ShmRingBuffer:
        """Attach to the ring described by ``handle`` (never unlinks it)."""
        return cls(handle.n_reader, handle.max_chunk_bytes, handle.max_chunks, handle.name, False)

    def __reduce__(self) -> tuple[object, tuple[RingHandle]]:
        return (ShmRingBuffer.attach, (self.handle(),))

    @property
    def segment(self) -> SharedSegment:
        """The mapped segment (``name``, ``buf``, ``size``): storing into it bypasses
        the protocol."""
        return self._segment

    @property
    def name(self) -> str:
        return self._segment.name

    @property
    def is_creator(self) -> bool:
        return self._segment.created

    @property
    def closed(self) -> bool:
        return self._segment.closed

    def __repr__(self) -> str:
        lay = self.layout
        role = self._role or "no role yet"
        state = " closed" if self.closed else ""
        return (
            f"<ShmRingBuffer {self.name!r} {lay.n_reader} readers x {lay.max_chunks} chunks of "
            f"{lay.max_chunk_bytes} bytes, {role}{state}>"
        )

    def held_bytes(self) -> int:
        """Bytes of ``/dev/shm`` the segment holds now (its pages backed so far)."""
        return self._segment.held_bytes()

    def handle(self) -> RingHandle:
        lay = self.layout
        return RingHandle(lay.n_reader, lay.max_chunk_bytes, lay.max_chunks, self.name)

    def writer(
        self, observer: StepObserver | None = None, log_interval: float = DEFAULT_LOG_INTERVAL
    ) -> WriterCursor:
        """The writer cursor. At most one per segment per process."""
        require_observer(observer, STEP_OBSERVER_METHODS, "StepObserver")
        self._claim("writer", None)
        cursor = WriterCursor(self.views, PageReserver(self._segment, self.layout, self._reserve),
                              observer, log_interval)
        self._cursors.append(cursor)
        return cursor

    def reader(
        self,
        index: int,
        observer: StepObserver | None = None,
        log_interval: float = DEFAULT_LOG_INTERVAL,
        wake_on_publish: bool = True,
    ) -> ReaderCursor:
        """The cursor of local reader ``index`` (0..n_reader-1, not a global rank).
        ``wake_on_publish=False``: its waits sleep, doubling, instead of blocking
        until the writer wakes them (for comparison)."""
        self.layout.check_reader(index)
        require_observer(observer, STEP_OBSERVER_METHODS, "StepObserver")
        self._claim("reader", index)
        cursor = ReaderCursor(self.views, index, observer, log_interval, wake_on_publish)
        self._cursors.append(cursor)
        return cursor

    def _claim(self, role: str, index: int | None) -> None:
        if self.closed:
            raise ClosedError(f"ring {self.name!r} is closed")
        if self._role is not None and self._role != role:
            raise MisuseError(
                f"ring {self.name!r}: this instance is the {self._role}'s; a {role} cursor "
                "needs its own instance (ShmRingBuffer.attach(handle))"
            )
        key = (self.name, index)
        if key in claimed_roles:
            who = "a writer" if index is None else f"a reader with flag index {index}"
            raise MisuseError(
                f"ring {self.name!r} already has {who} in process {os.getpid()}: "
                "one writer per ring, and each flag index belongs to one reader"
            )
        claimed_roles.add(key)
        self._claims.append(key)
        self._role = role

    def creator_holds(self) -> bool:
        """Whether the ring's creator (the writer) still has its segment open, seen from
        any PID namespace (:meth:`~verifiedring.shm.SharedSegment.creator_holds`)."""
        return self._segment.creator_holds()

    def unlink(self) -> None:
        """Creator: remove the segment's name now. Processes that attached keep their
        mapping; none can attach any more, and no crash can leave the name behind."""
        self._segment.unlink()

    def close(self) -> None:
        """Release cursors and unmap; the creator also unlinks. Idempotent."""
        if self.closed:
            return
        for cursor in self._cursors:
            cursor.detach()
        self._cursors.clear()
        for key in self._claims:
            claimed_roles.discard(key)
        self._claims.clear()
        self.views.release()
        try:
            self._segment.close()
        except BufferError:
            raise MisuseError(
                f"ring {self.name!r}: cannot unmap while a chunk view is still referenced; "
                "do not keep the memoryview yielded by acquire_read/acquire_write"
            ) from None
        finally:
            if self.is_creator:
                self._segment.unlink()

    def __enter__(self) -> ShmRingBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
