"""One MessageQueue per process group: :func:`create_from_process_group`.

Ranks here are **group ranks** (as in vLLM): ``writer_rank`` is the writer's
rank in ``pg``, and each reader attaches with its own group rank, which is also
what ``local_reader_ranks`` lists. Only the handle broadcast needs a global
rank (``broadcast_object_list``'s ``src``), obtained with
``torch.distributed.get_global_rank``.

Which readers are local
    Every rank contributes :func:`host_identity` (``all_gather_object`` over
    ``pg``); a reader whose identity equals the writer's reads the shared-memory
    ring, every other reader is remote (ZeroMQ over TCP). The identity is the
    hostname plus the kernel boot id and the IPC namespace, so two containers
    that share a hostname but not ``/dev/shm`` are not mistaken for one host.
    ``VERIFIEDRING_HOST_ID`` overrides it (tests use this to put ranks of one
    machine on "different hosts"). A group on one host uses only the ring.

Which address remote readers connect to
    :func:`writer_connect_ip` on the writer, only when there are remote readers:
    ``VERIFIEDRING_CONNECT_IP`` if set, else ``VLLM_HOST_IP`` (vLLM's own
    override), else the address the hostname resolves to when it is not a
    loopback address, else ``127.0.0.1`` with a warning (remote readers on this
    machine only). It never probes the network to guess a route: on a multi-host
    group whose hostname resolves to loopback, set ``VERIFIEDRING_CONNECT_IP``.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from ..errors import MisuseError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

logger = logging.getLogger("verifiedring")

HOST_ID_ENV = "VERIFIEDRING_HOST_ID"
CONNECT_IP_ENV = "VERIFIEDRING_CONNECT_IP"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def host_identity() -> str:
    """Equal for two processes exactly when they can share a /dev/shm segment."""
    override = os.environ.get(HOST_ID_ENV)
    if override:
        return override
    try:
        ipc = str(os.stat("/proc/self/ns/ipc").st_ino)
    except OSError:
        ipc = ""
    return f"{socket.gethostname()}/{_read('/proc/sys/kernel/random/boot_id')}/{ipc}"


def writer_connect_ip() -> str:
    """The address remote readers use to reach this host (see the module doc)."""
    for env in (CONNECT_IP_ENV, "VLLM_HOST_IP"):
        ip = os.environ.get(env)
        if ip:
            return ip
    try:
        ip = socket.gethostbyname(socket.gethostname())
        if not ip.startswith("127."):
            return ip
    except OSError:
        pass
    logger.warning(
        "no address for remote readers: the hostname resolves to loopback and neither %s nor "
        "VLLM_HOST_IP is set; binding 127.0.0.1, which only readers on this host can reach",
        CONNECT_IP_ENV,
    )
    return "127.0.0.1"


def create_from_process_group(
    cls: Any,
    pg: ProcessGroup | None,
    max_chunk_bytes: int,
    max_chunks: int,
    writer_rank: int = 0,
    *,
    timeout: float | None = None,
) -> Any:
    """Build ``cls`` (a MessageQueue class) over ``pg``; every rank of ``pg`` calls it.

    The writer (group rank ``writer_rank``) creates the queue; the others attach
    as readers with their group rank. Returns after ``wait_until_ready(timeout)``.
    ``pg=None`` means the default group.
    """
    import torch.distributed as dist

    world = dist.get_world_size(pg)
    rank = dist.get_rank(pg)
    if not 0 <= writer_rank < world:
        raise MisuseError(f"writer_rank={writer_rank} is not a rank of a group of size {world}")
    if rank < 0:
        raise MisuseError("create_from_process_group called on a rank outside the group")
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, host_identity(), group=pg)
    local = [r for r in range(world) if r != writer_rank and hosts[r] == hosts[writer_rank]]
    box: list[Any] = [None]
    if rank == writer_rank:
        n_remote = world - 1 - len(local)
        queue = cls(
            n_reader=world - 1,
            n_local_reader=len(local),
            local_reader_ranks=local,
            max_chunk_bytes=max_chunk_bytes,
            max_chunks=max_chunks,
            connect_ip=writer_connect_ip() if n_remote else None,
        )
        box[0] = queue.export_handle()
    src = writer_rank if pg is None else dist.get_global_rank(pg, writer_rank)
    dist.broadcast_object_list(box, src=src, group=pg)
    if rank != writer_rank:
        queue = cls.create_from_handle(box[0], rank)
    queue.wait_until_ready(timeout)
    return queue
