"""The picklable :class:`Handle` a reader attaches with, and the reader-set rules."""

from __future__ import annotations

import dataclasses
import hmac
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..arena import ArenaHandle
from ..errors import BrokenPeerError, MisuseError, require_int
from ..ring import RingHandle
from ..shm import SHM_DIR
from .curve import CurveKeys
from .sockets import KEY_BYTES, Signer
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


def ring_tag(signer: Signer, ring: RingHandle | None, arena: ArenaHandle | None = None) -> bytes:
    """The tag of ``ring``'s (and the tensor ``arena``'s) name and geometry under the
    queue's key (without a ring: of that fact): a reader refuses a handle altered in
    either, or whose key is not the one the tag was made with."""
    body = "no ring" if ring is None else (
        f"{ring.name}/{ring.n_reader}/{ring.max_chunk_bytes}/{ring.max_chunks}"
    )
    if arena is not None:
        body += f"/arena {arena.name}/{arena.n_reader}/{arena.n_slots}/{arena.slot_bytes}"
    return signer.sign([body.encode()])[:16]


def check_tag(handle: Handle, signer: Signer, who: str) -> None:
    """:class:`BrokenPeerError` unless ``handle.ring_tag`` is the tag, under
    ``handle.hmac_key`` (``signer``), of the ring and arena the handle names: a wrong
    key, or an altered ring or arena. Neither the key nor the tag is shown."""
    ring, arena = handle.buffer_handle, handle.tensor_arena_handle
    if hmac.compare_digest(ring_tag(signer, ring, arena), handle.ring_tag):
        return
    names = "no ring" if ring is None else (
        f"ring segment {ring.name!r}, n_reader={ring.n_reader}, max_chunk_bytes="
        f"{ring.max_chunk_bytes}, max_chunks={ring.max_chunks}, arena {arena}"
    )
    raise BrokenPeerError(
        f"{who}: handle.ring_tag does not verify under handle.hmac_key for what the handle "
        f"names ({names}): the key is not the writer's, or the ring's or arena's name or "
        "geometry was altered (handle altered; neither key nor tag shown): use the handle "
        "the writer's export_handle() gave"
    )


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


def check_attach(handle: object, rank: object, local: bool | None = None) -> None:
    """Raise :class:`MisuseError` unless ``handle`` is a writer's :class:`Handle` and
    ``rank`` one of its readers' ranks: an int in ``0..n_reader``, or -1 (rankless);
    with ``local`` given, one of its local (true) or remote (false) readers' ranks."""
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
    if local is not None and (rank in handle.local_reader_ranks) != local:
        kind, role = ("a local", "LocalReader") if local else ("a remote", "RemoteReader")
        raise MisuseError(
            f"rank {rank} is not {kind} reader of this queue (local_reader_ranks "
            f"{list(handle.local_reader_ranks)}): it cannot attach as a {role} "
            "(MessageQueue.create_from_handle picks the role from the rank)"
        )
    require_int("handle.writer_pid", handle.writer_pid, 1)
    if len(handle.hmac_key) != KEY_BYTES:
        raise MisuseError(
            f"handle.hmac_key must be {KEY_BYTES} bytes, got {len(handle.hmac_key)} bytes "
            "(not shown: a key): use the handle the writer's export_handle() gave"
        )
    if handle.curve is not None:
        _check_curve(handle.curve)


def check_ipc(address: str, writer: str, who: str) -> None:
    """:class:`BrokenPeerError` unless the writer's ipc socket ``address`` exists."""
    path = address.removeprefix("ipc://")
    if not os.path.exists(path):
        raise BrokenPeerError(
            f"{who}: the writer's ipc socket {path!r} does not exist: {writer} closed the "
            "queue or died, or removed it once every reader had attached (a reader cannot "
            "join a running queue)"
        )


def remote_part(handle: Handle, rank: int) -> tuple[str, str, CurveKeys]:
    """A remote reader's part of the handle: the frames' and the acks' addresses, the
    keys. :class:`MisuseError` naming what is missing."""
    n_remote = handle.n_reader - len(handle.local_reader_ranks)
    if n_remote < 1:
        raise MisuseError(
            f"rank {rank} is not in local_reader_ranks {list(handle.local_reader_ranks)} "
            f"and the queue has no remote readers (n_reader={handle.n_reader} == "
            f"n_local_reader={len(handle.local_reader_ranks)}): rank {rank} is no reader"
        )
    sub, ack, curve = handle.remote_subscribe_addr, handle.remote_ack_addr, handle.curve
    if sub is None or ack is None or curve is None:
        name = "remote_subscribe_addr" if sub is None else "remote_ack_addr" if ack is None \
            else "curve"
        raise MisuseError(
            f"handle.{name} is None but the queue has {n_remote} remote reader(s): the "
            "handle was altered; use the one the writer's export_handle() gave"
        )
    return sub, ack, curve


#: Fields that hold a key or a tag: an error names their type, never their value.
SECRET_FIELDS = ("hmac_key", "ring_tag", "curve")
#: The z85 text of a CURVE key: 40 bytes.
CURVE_KEY_BYTES = 40

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
            got = _shown(name, value)
            raise MisuseError(
                f"handle.{name} must be {' or '.join(t.__name__ for t in types)}, got "
                f"{got}: use the handle the writer's export_handle() gave"
            )
    for name, scheme in (("local_subscribe_addr", "ipc"), ("remote_subscribe_addr", "tcp"),
                         ("remote_ack_addr", "tcp")):
        address = getattr(handle, name)
        if address is not None and not _address_ok(address, scheme):
            raise MisuseError(
                f"handle.{name}={address!r} is no {scheme}:// address "
                f"({'a path' if scheme == 'ipc' else 'tcp://HOST:PORT, PORT in 1..65535'}): "
                "use the handle the writer's export_handle() gave"
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


def _shown(name: str, value: object) -> str:
    """``value`` as an error shows it: a secret field's by its type only."""
    if name in SECRET_FIELDS:
        return f"a value of type {type(value).__name__} (not shown: it may be a key)"
    return repr(value)


def _check_curve(curve: CurveKeys) -> None:
    """Each CURVE key is 40 bytes of z85 and the heartbeat a positive int; an error
    names the key's type and length, never the key."""
    for f in dataclasses.fields(curve):
        if f.name == "heartbeat_timeout_ms":
            continue
        key = getattr(curve, f.name)
        if not isinstance(key, bytes) or len(key) != CURVE_KEY_BYTES:
            size = f", {len(key)} long" if isinstance(key, (bytes, str)) else ""
            raise MisuseError(
                f"handle.curve.{f.name} must be {CURVE_KEY_BYTES} bytes (a z85 CURVE key), got "
                f"a value of type {type(key).__name__}{size} (not shown: it may be a key): use "
                "the handle the writer's export_handle() gave"
            )
    require_int("handle.curve.heartbeat_timeout_ms", curve.heartbeat_timeout_ms, 1)


def _address_ok(address: str, scheme: str) -> bool:
    """Whether ``address`` is a ``scheme`` address ZeroMQ can connect to."""
    prefix = scheme + "://"
    if not address.startswith(prefix) or len(address) == len(prefix):
        return False
    if scheme == "ipc":
        return "\0" not in address
    host, sep, port = address[len(prefix):].rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def check_segment(bh: RingHandle) -> None:
    """:class:`BrokenPeerError` unless the segment ``bh`` names has the size its
    geometry needs (a missing one is left to the attach, which names it)."""
    expected = bh.layout.total_bytes
    try:
        actual = os.stat(os.path.join(SHM_DIR, bh.name)).st_size
    except FileNotFoundError:
        return
    if actual != expected:
        raise BrokenPeerError(
            f"segment {bh.name!r} has {actual} bytes but the handle's geometry "
            f"(n_reader={bh.n_reader}, max_chunk_bytes={bh.max_chunk_bytes}, "
            f"max_chunks={bh.max_chunks}) needs {expected}: handle and segment do not match"
        )
