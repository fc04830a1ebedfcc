"""MessageQueue: vLLM's entry point, one type per role behind it.

``MessageQueue(n_reader, n_local_reader, ...)`` builds the writer
(:class:`~verifiedring.queue.writer.QueueWriter`);
``MessageQueue.create_from_handle(handle, rank)`` attaches a reader
(:class:`~verifiedring.queue.local_reader.LocalReader` when ``rank`` is a local
reader rank, else :class:`~verifiedring.queue.remote_reader.RemoteReader`).
All three are subclasses of :class:`MessageQueue`, so ``isinstance`` and the
vLLM-shaped calls work on each; a call that belongs to another role raises
:class:`MisuseError`.

Protocol (model: ``spec/queue/MessageQueue.tla``; wire format: :mod:`.wire`)
-----------------------------------------------------------------------
* **Local readers** read every message from the ring. An object whose
  encoding fits a chunk (:meth:`RingLayout.fits`) is stored there whole; a
  larger one leaves an overflow marker (OVERFLOW + its sequence number) in the
  ring and travels as a frame with the same sequence number on the local ipc
  XPUB. A reader that took a marker releases the chunk at once and remembers
  the sequence number as *pending*; a timeout while the frame is awaited
  leaves it pending, so the retry returns that same object.
* **Large objects, streamed** (``large_objects="stream"``, :mod:`.flavors.run`): an
  object too large for one chunk is pickled straight into a run of chunks
  (FIRST, MORE..., LAST; ABORT when pickling raises mid-run) and unpickled
  straight out of them, each chunk released once consumed: it may be larger
  than the whole ring. Remote readers still get it as one frame.
* **Remote readers** never touch the ring: they receive every object as an
  authenticated frame on the remote TCP XPUB and acknowledge their received
  count to the writer's PULL socket (:mod:`.credit`).
* Every message carries the writer's sequence number (0, 1, 2, ...); a reader
  checks that it receives exactly the next one, whichever channel it took,
  and raises :class:`BrokenPeerError` on a gap instead of returning a wrong
  object. A message that does not unpickle is consumed first, then raises
  :class:`DecodeError`: the next ``dequeue`` returns the next message.
* The writer's ``close()`` (or its finalizer) sends SHUTDOWN(total) on both
  sockets; a reader raises :class:`ClosedError` once it has received ``total``
  messages. The writer's ``shutdown()`` only sets ``shutting_down`` (vLLM's).

A queue end is used from one thread: a second thread entering ``enqueue`` or
``dequeue`` while the first is inside raises :class:`BusyError` (one boolean,
trio's conflict detector) instead of corrupting the end's state.

Each end's state is named after the spec's (:mod:`.lifecycle`): the writer's
``wpc``, a reader's ``rpc``; :attr:`MessageQueue.state` shows it.
"""

from __future__ import annotations

import contextlib
import enum
import operator
from collections.abc import Iterator, Sized
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, NoReturn, TypeVar

import zmq

from .. import engine
from ..errors import BusyError, MisuseError
from ..steps import QUEUE_OBSERVER_METHODS, QueueObserver, require_observer
from ..waiting import Deadline
from .handle import Handle, check_attach
from .lifecycle import Lifecycle, WriterState, refusal

if TYPE_CHECKING:
    from ..arena import ArenaReader, ArenaWriter
    from ..cursor_base import Cursor
    from ..ring import ShmRingBuffer
    from .local_reader import LocalReader
    from .remote_reader import RemoteReader
    from .writer import QueueWriter

#: The least stall-log interval (seconds) an end accepts: a stall line at most this often.
MIN_LOG_INTERVAL = 0.001


def _checked_settings(observer: object) -> float:
    """The stall-log interval an end is built with (the engine policy's,
    :meth:`~verifiedring.engine.EnginePolicy.stall_log_interval`), refused below
    ``MIN_LOG_INTERVAL``; its ``observer`` refused unless it has the observer protocol."""
    require_observer(observer, QUEUE_OBSERVER_METHODS, "QueueObserver")
    policy = engine.policy
    interval = policy.stall_log_interval()
    if not interval >= MIN_LOG_INTERVAL:
        raise MisuseError(
            f"the stall-log interval {interval!r} s ({' or '.join(policy.log_interval_names)}) "
            f"must be >= {MIN_LOG_INTERVAL} s: below it a stall line is logged at "
            "every wait"
        )
    return interval


def busy(who: str, call: str) -> BusyError:
    """What ``call`` raises on end ``who`` while another thread is inside one of its
    calls (one boolean per end, trio's conflict detector)."""
    return BusyError(
        f"{who}: {call} called while another thread is inside this end's "
        "enqueue() or dequeue(): a queue end is used from one thread"
    )


def bytes_view(who: str, obj: Any) -> memoryview:
    """A dequeued object as ``acquire_read`` yields it to reader ``who``: ``bytes``
    read-only, else :class:`MisuseError` (the message was consumed)."""
    if not isinstance(obj, (bytes, bytearray)):
        raise MisuseError(
            f"{who}: acquire_read() got an object of type {type(obj).__qualname__}"
            ", not the bytes of an acquire_write(); it was consumed (use dequeue())"
        )
    return memoryview(obj).toreadonly()


def forwarded(part: str, name: str) -> Any:
    """An end's attribute kept by its part ``part`` (the end's attribute holding it) as
    ``name``: read and written through, so the part sees every store at once (the read,
    on ``readable()``'s path, one C call)."""
    return property(operator.attrgetter(f"{part}.{name}"),
                    lambda end, value: setattr(getattr(end, part), name, value))


_End = TypeVar("_End", bound="MessageQueue")
#: The class a ``create_from_*`` call is made on (an entry class of :class:`QueueEntry`).
_Made = TypeVar("_Made")


class EndParts(NamedTuple):
    """What an end holds, for reading (compat's vLLM attributes, a debugger): each part
    ``None`` where the end has none. Storing into a part bypasses the protocol."""

    #: The ring: the writer's (with local readers) or a local reader's.
    ring: ShmRingBuffer | None
    #: Its cursor on the ring: ``index`` is the next chunk it writes or reads.
    cursor: Cursor | None
    #: The local ipc socket: the writer's XPUB, a local reader's SUB.
    local_socket: zmq.Socket[Any] | None
    #: The TCP socket: the writer's XPUB, a remote reader's SUB.
    remote_socket: zmq.Socket[Any] | None
    #: The tensor arena: the writer's, or a local reader's half.
    arena: ArenaWriter | ArenaReader | None
    #: The per-message path (a :class:`~.writer_path.WriterPath`,
    #: :class:`~.local_path.LocalPath` or :class:`~.remote_path.RemotePath`).
    path: object


class RoleClasses(NamedTuple):
    """The classes an entry class builds, one per role."""

    writer: type[QueueWriter]
    local: type[LocalReader]
    remote: type[RemoteReader]


def core_roles() -> RoleClasses:
    """verifiedring's own role classes (imported at call time: they subclass MessageQueue)."""
    from .local_reader import LocalReader
    from .remote_reader import RemoteReader
    from .writer import QueueWriter

    return RoleClasses(QueueWriter, LocalReader, RemoteReader)


class QueueEntry(type):
    """How ends are made: vLLM's calls of the class ``MessageQueue`` itself, never of an
    end. ``MessageQueue(n_reader, n_local_reader, ...)`` builds the writer; the
    ``create_from_*`` calls attach readers or build every rank's end of a process group.
    Each builds the classes of its entry class's role map (:meth:`roles`: compat's names
    its own)."""

    def roles(cls) -> RoleClasses:
        """The role map of this entry class: what its constructor and
        :meth:`create_from_handle` build."""
        return core_roles()

    def create_from_handle(
        cls: type[_Made], handle: Handle, rank: int, *, observer: QueueObserver | None = None
    ) -> _Made:
        """Attach reader ``rank``: local if it is in ``handle.local_reader_ranks``.
        ``observer`` sees every protocol step from the subscription on (traces)."""
        check_attach(handle, rank)
        assert isinstance(cls, QueueEntry)  # self-typed for its callers: an entry's class
        roles = cls.roles()
        role = roles.local if rank in handle.local_reader_ranks else roles.remote
        if not issubclass(role, cls):  # a role class asked for the other role's rank
            raise MisuseError(f"{cls.__name__}.create_from_handle: rank {rank} of this "
                              f"handle is a {role.__name__}")
        made: _Made = role(handle, rank, observer)
        return made

    def create_from_process_group(
        cls: type[_Made], pg: Any, max_chunk_bytes: int, max_chunks: int, writer_rank: int = 0,
        external_writer_handle: Handle | None = None, blocking: bool = True,
    ) -> _Made:
        """Every rank of ``pg`` calls this; see :mod:`verifiedring.distributed.group`."""
        from ..distributed import group  # the torch layer, at call time only

        queue: _Made = group.create_from_process_group(
            cls, pg, max_chunk_bytes, max_chunks, writer_rank, external_writer_handle, blocking
        )
        return queue

    def create_from_process_group_single_reader(
        cls: type[_Made], pg: Any, max_chunk_bytes: int, max_chunks: int, reader_rank: int = 0,
        blocking: bool = False,
    ) -> tuple[_Made, list[Handle]]:
        """Every rank writes to one reader; see :mod:`verifiedring.distributed.group`."""
        from ..distributed import group  # the torch layer, at call time only

        made: tuple[_Made, list[Handle]] = group.create_from_process_group_single_reader(
            cls, pg, max_chunk_bytes, max_chunks, reader_rank, blocking)
        return made


class MessageQueue(metaclass=QueueEntry):
    """One end of a broadcast queue: the writer, a local reader or a remote reader."""

    is_writer: ClassVar[bool] = False
    is_local_reader: ClassVar[bool] = False
    is_remote_reader: ClassVar[bool] = False

    # A class-level default so close() and __del__ work on a half-built end.
    _closed = True
    #: The end's state (the spec's ``wpc`` or ``rpc``), reason and sequence number.
    _life: Lifecycle[Any]
    #: The state an end is built in, refusing until :meth:`wait_until_ready` returns.
    _opening: ClassVar[enum.Enum] = WriterState.HANDSHAKE
    #: Sees every protocol step (trace validation); ``None`` in production.
    _observer: QueueObserver | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> MessageQueue:
        if not (cls.is_writer or cls.is_local_reader or cls.is_remote_reader):
            return object.__new__(cls.roles().writer)  # an entry class: vLLM's, the writer
        return object.__new__(cls)

    n_reader: int
    n_local_reader: int
    max_chunk_bytes: int
    #: Seconds between two stall lines of one wait.
    log_interval: float

    if TYPE_CHECKING:  # what MessageQueue(...) accepts: the writer's parameters

        def __init__(
            self,
            n_reader: int,
            n_local_reader: int,
            local_reader_ranks: list[int] | None = None,
            max_chunk_bytes: int = ...,
            max_chunks: int = ...,
            connect_ip: str | None = None,
            **kwargs: Any,
        ) -> None: ...

    def _open(self) -> float:
        """Common state of an end being built (its lifecycle made, refusing in state
        ``_opening`` until :meth:`wait_until_ready` returns): the process-wide zmq
        context; returns the stall-log interval it is to use. The constructor sets
        ``_closed = False`` once every resource is held."""
        # pyzmq makes a new instance after fork. A queue never terminates it:
        # zmq_ctx_term can block forever (seen under load with every socket closed
        # at linger 0); closing a socket with a linger bounds its queued frames.
        interval = _checked_settings(self._observer)
        self._ctx: zmq.Context[Any] = zmq.Context.instance()
        #: Set by :meth:`shutdown` (vLLM's attribute): a reader's blocked call wakes and
        #: raises; the writer's calls go on.
        self.shutting_down = False
        return interval

    # --- the calls of every role ------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def parts(self) -> EndParts:
        """What this end holds, for reading (:class:`EndParts`)."""
        raise NotImplementedError

    def _who(self) -> str:
        raise NotImplementedError

    @property
    def state(self) -> enum.Enum:
        """This end's state: a :class:`~.lifecycle.WriterState` (the spec's ``wpc``)
        or :class:`~.lifecycle.ReaderState` (``rpc``)."""
        state: enum.Enum = self._life.state
        return state

    def _refuse(self) -> NoReturn:
        """Raise why this end cannot operate now (its state and reason)."""
        raise refusal(self._life.state, self._who(), self._life.why)

    def __repr__(self) -> str:
        life = vars(self).get("_life")  # made after what _who() reads
        if life is None:  # half-built (a debugger's view of __init__)
            return f"<{type(self).__name__} unopened>"
        return f"<{type(self).__name__} {self._who()} seq {life.seq} {life.state.value}>"

    def _wrong_role(self, call: str) -> MisuseError:
        role = "the writer" if self.is_writer else "a reader"
        return MisuseError(f"{self._who()}: {call} is not a call of {role}")

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Collective: the writer waits for every reader to subscribe, then sends READY;
        each reader waits for READY. Idempotent once it has returned."""
        if self._closed:
            self._refuse()
        if self.state is not self._opening:
            return
        self._handshake(Deadline.after(timeout))

    def _handshake(self, deadline: Deadline) -> None:
        """This role's side of the READY handshake; it leaves the opening state."""
        raise NotImplementedError

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        raise self._wrong_role("enqueue()")

    def dequeue(
        self, timeout: float | None = None, *, cancel: Any = None, indefinite: bool = False
    ) -> Any:
        raise self._wrong_role("dequeue()")

    def export_handle(self) -> Handle:
        raise self._wrong_role("export_handle()")

    def readable(self) -> bool:
        """vLLM 0.34's look, a reader's (:meth:`.QueueReader.readable`)."""
        raise self._wrong_role("readable()")

    def spin_until_readable(self, pending: Sized, deadline: float) -> None:
        """vLLM 0.34's short wait, a reader's (:meth:`.QueueReader.spin_until_readable`)."""
        raise self._wrong_role("spin_until_readable()")

    def shutdown(self) -> None:
        raise self._wrong_role("shutdown()")

    def acquire_write(
        self, timeout: float | None = None
    ) -> contextlib.AbstractContextManager[memoryview]:
        raise self._wrong_role("acquire_write()")

    @contextlib.contextmanager
    def acquire_read(
        self, timeout: float | None = None, indefinite: bool = False
    ) -> Iterator[memoryview]:
        """vLLM's buffer API, reader (a local reader reads the ring chunk in place:
        :meth:`.LocalReader.acquire_read`): the next message's bytes, read-only. The
        message must have been written with :meth:`acquire_write` (or be a ``bytes``);
        any other object is consumed and raises :class:`MisuseError` naming its type."""
        with bytes_view(self._who(), self.dequeue(timeout, indefinite=indefinite)) as buf:
            yield buf

    def broadcast_object(self, obj: Any = None) -> Any:
        """Writer: enqueue ``obj`` and return it. Reader: return the next object."""
        if self.is_writer:
            self.enqueue(obj)
            return obj
        return self.dequeue()

    def close(self) -> None:
        """Tell the readers the end (writer: SHUTDOWN, then a wait only for what a remote
        reader still there has not acknowledged), close sockets and the segment.
        Idempotent."""
        if self._closed:
            return
        try:
            self._before_close()
        finally:
            self._closed = True
            self._life.enter(self._closed_state, "the queue is closed")
            self._release()

    _closed_state: ClassVar[enum.Enum] = WriterState.CLOSED

    def _before_close(self) -> None:
        """What a role does before its resources go (the writer sends SHUTDOWN)."""

    def _release(self) -> None:
        raise NotImplementedError

    def __enter__(self: _End) -> _End:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        """Dropped without :meth:`close` (as vLLM and SGLang release theirs): clean up
        exactly as ``close()`` does, silently."""
        if not self._closed:
            with contextlib.suppress(Exception):
                self.close()

