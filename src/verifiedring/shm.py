"""POSIX shared-memory segments with explicit ownership.

Unlike ``multiprocessing.shared_memory.SharedMemory`` on Python < 3.13, an
attacher here never registers the segment with the resource tracker, so an
attaching process neither warns about a "leaked" segment nor unlinks it
early when it exits. Only the creator registers (so a crashed creator's
segment is still reclaimed) and only the creator unlinks.

Segments are created with mode 0600: readable and writable by their owner
only, named with the creator's pid (:mod:`verifiedring.leftovers` reaps those
of dead creators at each create). No page is ever touched unreserved: create
reserves (``posix_fallocate``) the ranges it is told to commit (default: all),
the rest stays sparse until :meth:`SharedSegment.reserve` backs it, before
any store there. A create's room check asks for the bytes it is told (default:
the whole segment; a ring's are its room policy's, :mod:`verifiedring.reservation`).
Creates in one ``/dev/shm`` (whatever PID namespace each runs in) take turns:
each holds the directory's lock from its room check to the end of its
reservation, so concurrent creates never split the room between them and fail
together: they are exact for what they reserve. A later reservation takes the
same turn. A full ``/dev/shm`` is a
:class:`SharedMemoryFullError` (a :class:`MisuseError`) naming the sizes at that
call, never a SIGBUS at the first touch of a page later. A created segment that is collected without
:meth:`SharedSegment.unlink` is unlinked then, by its creator process only.
"""

from __future__ import annotations

import _posixshmem
import contextlib
import errno
import fcntl
import logging
import mmap
import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from multiprocessing import resource_tracker

from . import engine
from .cgroup import check_cgroup_memory_available
from .engine import RoomCheck
from .errors import BrokenPeerError, ClosedError, MisuseError, SharedMemoryFullError
from .leftovers import SEGMENT_PREFIX, SHM_DIR, hold, reap, segment_name

NAME_PREFIX = SEGMENT_PREFIX
SEGMENT_MODE = 0o600
__all__ = [
    "ARENA_SEGMENT", "NAME_PREFIX", "RING_SEGMENT", "SHM_DIR", "RoomCheck", "SharedSegment",
    "check_room", "no_room", "preflight",
]

logger = logging.getLogger("verifiedring")

#: What the library's segments are called in errors, and what each error advises.
RING_SEGMENT = "the ring's segment"
ARENA_SEGMENT = "the tensor arena's segment"
_SHRINK = {
    RING_SEGMENT: "shrink max_chunk_bytes * max_chunks",
    ARENA_SEGMENT: "shrink the tensor arena (arena_slots * arena_slot_bytes), or build the "
                   "queue without it (enable_shm_tensor_arena=False)",
}
#: ``posix_fallocate`` errors that mean "no room" (tmpfs full, too large, memory cgroup).
_NO_ROOM_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.ENOMEM)


def _tracker_name(name: str) -> str:
    return "/" + name


def free_bytes(directory: str = SHM_DIR) -> int | None:
    """Bytes free in ``directory`` (``None`` where it cannot be inspected)."""
    try:
        st = os.statvfs(directory)
    except FileNotFoundError:
        return None  # no tmpfs to inspect (e.g. macOS): let shm_open decide
    return st.f_bavail * st.f_frsize


def no_room(
    size: int, free: int | None, directory: str = SHM_DIR, what: str = RING_SEGMENT
) -> SharedMemoryFullError:
    mib = 1 << 20
    if free is not None and free >= size:  # the check passed, the reservation did not
        why = (f"{free} bytes are reported free, but they could not be reserved (another "
               "process took them meanwhile, or a memory limit of the container is reached)")
    else:
        why = f"{'an unknown number of' if free is None else free} bytes free"
    return SharedMemoryFullError(
        f"Insufficient space in {directory} for {what}: {size} bytes ({size / mib:.1f} MiB) "
        f"required, {why}: {_SHRINK.get(what, 'free some of it')} or enlarge {directory} "
        "(e.g. --shm-size or --ipc=host)"
    )


def check_room(size: int, directory: str = SHM_DIR, what: str = RING_SEGMENT) -> None:
    """Raise :class:`SharedMemoryFullError` (a ``MisuseError`` and, as vLLM's check
    raises, a ``RuntimeError``) if ``directory`` cannot hold ``size`` more bytes;
    then log the memory cgroup's headroom (:mod:`verifiedring.cgroup`)."""
    free = free_bytes(directory)
    if free is not None and size > free:
        raise no_room(size, free, directory, what)
    check_cgroup_memory_available(size, what)


def preflight(size: int, what: str = RING_SEGMENT) -> None:
    """The room check in use for a segment of ``size`` bytes: the engine policy's
    (:class:`~verifiedring.engine.EnginePolicy`), else :func:`check_room`."""
    (engine.policy.room_check or check_room)(size, SHM_DIR, what)


#: The longest a create waits for another's turn (one that holds it longer is stopped
#: or hung: the create goes on without its turn, logged).
TURN_WAIT = 10.0


#: ``.held``: this thread's turn (a 1-tuple of its directory descriptor, one per turn)
#: while it is held. An interrupt that cuts the turn's exit leaves it here, and the
#: thread's next turn closes it, so the lock is never held past the next create or
#: reservation.
_TURN = threading.local()


@contextlib.contextmanager
def _turn(directory: str = SHM_DIR) -> Iterator[None]:
    """Hold ``directory``'s lock (``flock`` on the directory itself, so nothing is left
    behind; the kernel keeps it across PID namespaces) for the block, waiting at
    most :data:`TURN_WAIT`; without it where the directory cannot be opened."""
    stale: tuple[int] | None = getattr(_TURN, "held", None)
    if stale is not None:  # a turn of this thread whose exit an interrupt cut
        _TURN.held = None
        os.close(stale[0])  # releases its lock
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    held = (fd,)
    _TURN.held = held
    try:
        deadline = time.monotonic() + TURN_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    logger.warning("pid %d: another process held %s's create lock for %.0f s: "
                                   "creating without it", os.getpid(), directory, TURN_WAIT)
                    break
                time.sleep(0.0005)
        yield
    finally:
        # unless a later turn closed it already (this exit was cut, the generator is
        # finished late): cleared first, so a cut between leaves it closed, not recorded
        if getattr(_TURN, "held", None) is held:
            _TURN.held = None
            os.close(fd)  # releases the lock


def _unlink_if_creator(name: str, creator: int) -> None:
    """The finalizer of a created segment: unlink it, in the creator process only."""
    if os.getpid() == creator:
        with contextlib.suppress(FileNotFoundError):
            _posixshmem.shm_unlink(_tracker_name(name))
        resource_tracker.unregister(_tracker_name(name), "shared_memory")


class SharedSegment:
    """One mapped POSIX shared-memory segment.

    Invariant: ``buf`` is a writable memoryview of exactly ``size`` bytes
    while open, and the segment's descriptor is open (for :meth:`reserve`);
    after :meth:`close` both are released.
    """

    def __init__(self, name: str, fd: int, size: int, created: bool) -> None:
        self.name = name
        self.size = size
        self.created = created
        try:
            self._mmap: mmap.mmap | None = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._fd_closer = weakref.finalize(self, os.close, fd)
        self.buf = memoryview(self._mmap)
        self._unlinked = False
        self._finalizer = (
            weakref.finalize(self, _unlink_if_creator, name, os.getpid()) if created else None
        )

    @classmethod
    def create(
        cls, size: int, name: str | None = None,
        commit: Sequence[tuple[int, int]] | None = None, what: str = RING_SEGMENT,
        room: int | None = None,
    ) -> SharedSegment:
        """Create a zero-filled segment of ``size`` bytes (fails if ``name`` exists),
        its ``commit`` ranges ``(offset, length)`` backed by pages now (default: all
        of it), the rest sparse. The room check in use (:func:`preflight`) asks for
        ``room`` bytes (default: all ``size``, as vLLM's). No room (bytes or
        inodes): :class:`SharedMemoryFullError` naming ``what``."""
        if size < 1:
            raise MisuseError(f"segment size must be >= 1 byte, got {size}")
        reap()
        with _turn():  # the room check and the reservation: one step among creates
            return cls._create(size, name or segment_name(),
                               ((0, size),) if commit is None else commit, what,
                               size if room is None else room)

    @classmethod
    def _create(
        cls, size: int, name: str, ranges: Sequence[tuple[int, int]], what: str, room: int
    ) -> SharedSegment:
        preflight(room, what)
        try:
            fd = _posixshmem.shm_open(
                _tracker_name(name), os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=SEGMENT_MODE
            )
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise SharedMemoryFullError(
                f"no inode left in {SHM_DIR} for {what} (its bytes may be free: see df -i): "
                "remove what other processes left there (python -m verifiedring cleanup) or "
                "mount it with more inodes (nr_inodes)"
            ) from None
        try:
            hold(fd)  # in use from now on, seen from every PID namespace; sized after
            os.ftruncate(fd, size)
            try:
                for offset, length in ranges:  # these pages now, or a clear error now
                    os.posix_fallocate(fd, offset, length)
            except OSError as exc:
                if exc.errno not in _NO_ROOM_ERRNOS:
                    raise
                raise no_room(sum(n for _, n in ranges), free_bytes(), SHM_DIR, what) from None
        except BaseException:
            os.close(fd)
            _posixshmem.shm_unlink(_tracker_name(name))
            raise
        resource_tracker.register(_tracker_name(name), "shared_memory")
        return cls(name, fd, size, created=True)

    @classmethod
    def attach(cls, name: str, size: int) -> SharedSegment:
        """Map the existing segment ``name``, which must hold at least ``size`` bytes."""
        try:
            fd = _posixshmem.shm_open(_tracker_name(name), os.O_RDWR, mode=SEGMENT_MODE)
        except FileNotFoundError:
            raise BrokenPeerError(
                f"shared-memory segment {name!r} does not exist: its creator closed it, "
                "never created it, or removed its name once every reader had attached"
            ) from None
        actual = os.fstat(fd).st_size
        if actual < size:
            os.close(fd)
            raise BrokenPeerError(
                f"shared-memory segment {name!r} has {actual} bytes but the ring geometry "
                f"needs {size}: the handle does not match the segment"
            )
        return cls(name, fd, size, created=False)

    @property
    def closed(self) -> bool:
        return self._mmap is None

    def reserve(self, offset: int, length: int, what: str) -> None:
        """Back bytes ``offset .. offset + length`` (within the segment) with pages now
        (``posix_fallocate``, in the directory's turn, as creates take it: so it fails
        only when fewer bytes are free than it wants; pages already backed keep their
        bytes). No room:
        :class:`SharedMemoryFullError` naming this segment, ``what``, the bytes wanted
        and the bytes free; the segment is unchanged and stays usable."""
        if self._mmap is None:
            raise ClosedError(f"segment {self.name!r} is closed: cannot reserve {what}")
        try:
            with _turn():  # as a create's: two reservations never split the room and fail
                os.posix_fallocate(self._fd, offset, length)
        except OSError as exc:
            if exc.errno not in _NO_ROOM_ERRNOS:
                raise
            free = free_bytes()
            raise SharedMemoryFullError(
                f"segment {self.name!r}: no room in {SHM_DIR} for {what}: {length} more "
                f"bytes wanted (offset {offset}), "
                f"{'an unknown number of' if free is None else free} bytes free "
                f"({os.strerror(exc.errno)}); nothing was stored: free {SHM_DIR} (or the "
                "memory cgroup) and retry"
            ) from None

    def creator_holds(self) -> bool:
        """Whether the process that created this segment still has it open (it holds
        the segment's lock: :func:`~verifiedring.leftovers.hold`), whatever PID
        namespace it is in. For attached ends only: the creator's own answer is true."""
        if self.created:
            return True
        fd = self._fd
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False

    def held_bytes(self) -> int:
        """Bytes of ``/dev/shm`` this segment holds now (its backed pages)."""
        if self._mmap is None:
            raise ClosedError(f"segment {self.name!r} is closed")
        return os.fstat(self._fd).st_blocks * 512

    def close(self) -> None:
        """Unmap the segment and close its descriptor. Idempotent. Views handed out
        must be released first."""
        if self._mmap is None:
            return
        self.buf.release()
        self._mmap.close()
        self._mmap = None
        self._fd_closer()

    def unlink(self) -> None:
        """Remove the segment's name (creator only). Idempotent."""
        if not self.created:
            raise MisuseError(f"segment {self.name!r}: only its creator may unlink it")
        if self._unlinked:
            return
        self._unlinked = True
        if self._finalizer is not None:
            self._finalizer()  # unlinks now (this is the creator) and never again
