"""One MessageQueue per process group: :func:`create_from_process_group`.

Ranks here are **group ranks** (as in vLLM): ``writer_rank`` is the writer's
rank in ``pg``, and each reader attaches with its own group rank, which is also
what ``local_reader_ranks`` lists. Only the handle broadcast needs a global
rank (``broadcast_object_list``'s ``src``), obtained with
``torch.distributed.get_global_rank``.

Which readers are local, and the address remote readers connect to, are
:mod:`verifiedring.hosts`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import MisuseError
from ..hosts import host_identity, writer_connect_ip

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

logger = logging.getLogger("verifiedring")


def _group(pg: Any) -> tuple[int, int, Callable[[Any, int], Any], Callable[[Any], list[Any]]]:
    """``(rank, world, broadcast(obj, src_group_rank), all_gather(obj))`` of ``pg``: a
    torch ProcessGroup (``None``: the default group) or a torch-free group with
    ``rank``, ``world_size``, ``broadcast_obj`` and ``all_gather_obj`` (vLLM's
    StatelessProcessGroup)."""
    if pg is not None and hasattr(pg, "broadcast_obj") and hasattr(pg, "world_size"):
        return int(pg.rank), int(pg.world_size), pg.broadcast_obj, pg.all_gather_obj
    import torch.distributed as dist

    world, rank = dist.get_world_size(pg), dist.get_rank(pg)

    def broadcast(obj: Any, src: int) -> Any:
        box = [obj]
        dist.broadcast_object_list(
            box, src=src if pg is None else dist.get_global_rank(pg, src), group=pg
        )
        return box[0]

    def all_gather(obj: Any) -> list[Any]:
        out: list[Any] = [None] * world
        dist.all_gather_object(out, obj, group=pg)
        return out

    return rank, world, broadcast, all_gather


def create_from_process_group(
    cls: Any,
    pg: ProcessGroup | Any | None,
    max_chunk_bytes: int,
    max_chunks: int,
    writer_rank: int = 0,
    external_writer_handle: Any = None,
    blocking: bool = True,
    *,
    timeout: float | None = None,
) -> Any:
    """Build ``cls`` (a MessageQueue class) over ``pg``; every rank of ``pg`` calls it.

    The writer (group rank ``writer_rank``) creates the queue -- or, given
    ``external_writer_handle``, attaches to that queue as a reader and hands its
    handle on (vLLM's external-writer case); the others attach as readers with
    their group rank. With ``blocking``, returns after ``wait_until_ready(timeout)``.
    ``pg=None`` means the default group; a StatelessProcessGroup works too.
    """
    rank, world, broadcast, all_gather = _group(pg)
    if not 0 <= writer_rank < world:
        raise MisuseError(f"writer_rank={writer_rank} is not a rank of a group of size {world}")
    if rank < 0:
        raise MisuseError("create_from_process_group called on a rank outside the group")
    hosts = all_gather(host_identity())
    local = [r for r in range(world) if r != writer_rank and hosts[r] == hosts[writer_rank]]
    handle = None
    if rank == writer_rank:
        if external_writer_handle is not None:
            queue = cls.create_from_handle(external_writer_handle, rank)
        else:
            n_remote = world - 1 - len(local)
            queue = cls(
                n_reader=world - 1,
                n_local_reader=len(local),
                local_reader_ranks=local,
                max_chunk_bytes=max_chunk_bytes,
                max_chunks=max_chunks,
                connect_ip=writer_connect_ip() if n_remote else None,
            )
        handle = queue.export_handle()
    handle = broadcast(handle, writer_rank)
    if rank != writer_rank:
        queue = cls.create_from_handle(handle, rank)
    if blocking:
        queue.wait_until_ready(timeout)
    return queue


def create_from_process_group_single_reader(
    cls: Any,
    pg: ProcessGroup | Any | None,
    max_chunk_bytes: int,
    max_chunks: int,
    reader_rank: int = 0,
    blocking: bool = False,
) -> tuple[Any, list[Any]]:
    """vLLM's many-writers-one-reader set-up: every rank of ``pg`` makes a queue with
    one reader (local when it shares the reader's host) and the reader gathers all
    handles. Returns ``(this rank's queue, the handles -- only on the reader)``."""
    rank, world, _, all_gather = _group(pg)
    if not 0 <= reader_rank < world:
        raise MisuseError(f"reader_rank={reader_rank} is not a rank of a group of size {world}")
    hosts = all_gather(host_identity())
    same_host = hosts[rank] == hosts[reader_rank]
    queue = cls(
        n_reader=1,
        n_local_reader=1 if same_host else 0,  # the reader attaches as rank 0 (vLLM's)
        max_chunk_bytes=max_chunk_bytes,
        max_chunks=max_chunks,
        connect_ip=None if same_host else writer_connect_ip(),
    )
    handles = all_gather(queue.export_handle())
    if blocking:
        queue.wait_until_ready()
    return queue, handles if rank == reader_rank else []
