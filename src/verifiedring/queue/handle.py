"""The picklable :class:`Handle` a reader attaches with, and the reader-set rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..arena import ArenaHandle
from ..errors import MisuseError, require_int
from ..ring import RingHandle
from .curve import CurveKeys
from .sockets import Signer
from .wire import MAX_RANK


@dataclass(frozen=True)
class Handle:
    """Everything a reader needs to attach (picklable). The key never shows in a repr.

    Shaped like vLLM's: every field has a default (``Handle()`` is an empty handle no
    reader can attach with), the ranks are a list, and ``dataclasses.replace`` works;
    a reader still refuses a handle whose ring or arena was altered (``ring_tag``)."""

    n_reader: int = 0
    local_reader_ranks: list[int] = field(default_factory=list)
    buffer_handle: RingHandle | None = None
    local_subscribe_addr: str | None = None
    remote_subscribe_addr: str | None = None
    remote_ack_addr: str | None = None
    remote_window: int = 0
    hmac_key: bytes = field(default=b"", repr=False)
    #: Binds ``buffer_handle`` (name and geometry) to the key: a handle whose ring
    #: geometry was altered, even to the same total size, is refused at attach.
    ring_tag: bytes = field(default=b"", repr=False)
    #: The remote channel's CURVE keys (``None`` without remote readers).
    curve: CurveKeys | None = field(default=None, repr=False)
    #: The writer process, so a reader waiting for it can tell it has died.
    writer_pid: int = 0
    writer_host: str = ""
    #: The writer's tensor arena (``enable_shm_tensor_arena``, local readers only).
    tensor_arena_handle: ArenaHandle | None = None
    #: vLLM's: whether ``remote_subscribe_addr`` is an IPv6 address.
    remote_addr_ipv6: bool = False
    #: vLLM's reader-wakeup socket. Always ``None``: a sleeping reader here waits on its
    #: futex word in the ring segment, and the writer wakes it there.
    local_notify_addr: str | None = None


def ring_tag(signer: Signer, ring: RingHandle, arena: ArenaHandle | None = None) -> bytes:
    """The tag of ``ring``'s (and the tensor ``arena``'s) name and geometry under the
    queue's key: a reader refuses a handle altered in either."""
    body = f"{ring.name}/{ring.n_reader}/{ring.max_chunk_bytes}/{ring.max_chunks}"
    if arena is not None:
        body += f"/arena {arena.name}/{arena.n_reader}/{arena.n_slots}/{arena.slot_bytes}"
    return signer.sign([body.encode()])[:16]


def check_counts(
    n_reader: int, n_local_reader: int, local_reader_ranks: Sequence[int] | None
) -> tuple[int, ...]:
    """The local reader ranks, checked: ``n_local_reader`` distinct ints in
    ``0..n_reader``, at most ``n_reader`` readers in all. Raises :class:`MisuseError`
    naming the values."""
    for name, value in (("n_reader", n_reader), ("n_local_reader", n_local_reader)):
        require_int(name, value, 0)
    if n_reader < 1:
        raise MisuseError("n_reader must be >= 1: a queue with no reader has no use")
    if n_local_reader > n_reader:
        raise MisuseError(
            f"n_local_reader={n_local_reader} exceeds n_reader={n_reader}: local readers are "
            "a subset of all readers"
        )
    ranks = tuple(range(n_local_reader) if local_reader_ranks is None else local_reader_ranks)
    for rank in ranks:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= n_reader:
            raise MisuseError(
                f"local_reader_ranks={list(ranks)}: {rank!r} is no reader rank (ints in "
                f"0..n_reader={n_reader}: a process group's ranks, the writer's among them)"
            )
    if len(ranks) != n_local_reader or len(set(ranks)) != len(ranks):
        raise MisuseError(
            f"local_reader_ranks={list(ranks)} must list n_local_reader={n_local_reader} "
            "distinct ranks"
        )
    return ranks


def check_attach(handle: object, rank: object) -> None:
    """Raise :class:`MisuseError` unless ``handle`` is a writer's :class:`Handle` and
    ``rank`` one of its readers' ranks: an int in ``0..n_reader``, or -1 (rankless)."""
    if not isinstance(handle, Handle):
        raise MisuseError(f"expected a Handle, got {type(handle).__name__}")
    _check_fields(handle)
    if handle.n_reader < 1:
        raise MisuseError(
            "the handle has no reader (an empty Handle()): attach with the handle the "
            "writer's export_handle() gave"
        )
    if isinstance(rank, bool) or not isinstance(rank, int) or not -1 <= rank < MAX_RANK:
        raise MisuseError(
            f"rank must be an int in 0..{MAX_RANK - 1}, or -1 for a remote reader without "
            f"a rank, got {rank!r}"
        )
    if rank > handle.n_reader:
        raise MisuseError(
            f"rank {rank} is no reader of this queue (n_reader={handle.n_reader}: ranks "
            f"0..{handle.n_reader}, or -1)"
        )


#: Each field's types (``None`` where it may be absent), as a reader reads them.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "buffer_handle": (RingHandle, type(None)),
    "local_subscribe_addr": (str, type(None)),
    "remote_subscribe_addr": (str, type(None)),
    "remote_ack_addr": (str, type(None)),
    "hmac_key": (bytes,),
    "ring_tag": (bytes,),
    "curve": (CurveKeys, type(None)),
    "writer_host": (str,),
    "tensor_arena_handle": (ArenaHandle, type(None)),
    "remote_addr_ipv6": (bool,),
    "local_notify_addr": (str, type(None)),
}


def _check_fields(handle: Handle) -> None:
    """Raise :class:`MisuseError` naming the first field of ``handle`` (an altered or
    hand-built one) whose value is not of its type, before anything uses it."""
    for name, types in _FIELD_TYPES.items():
        value = getattr(handle, name)
        if not isinstance(value, types):
            raise MisuseError(
                f"handle.{name} must be {' or '.join(t.__name__ for t in types)}, got "
                f"{value!r}: use the handle the writer's export_handle() gave"
            )
    for name, least in (("n_reader", 0), ("remote_window", 0), ("writer_pid", 0)):
        require_int(f"handle.{name}", getattr(handle, name), least)
    if handle.remote_subscribe_addr is not None:
        require_int("handle.remote_window", handle.remote_window, 1)
    ranks = handle.local_reader_ranks
    if not isinstance(ranks, list) or any(
        isinstance(r, bool) or not isinstance(r, int) for r in ranks
    ):
        raise MisuseError(f"handle.local_reader_ranks must be a list of ints, got {ranks!r}")
