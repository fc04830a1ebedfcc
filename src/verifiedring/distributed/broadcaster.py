"""GroupBroadcaster: objects through the MessageQueue, tensors over the collectives.

A :class:`GroupBroadcaster` holds what one process group needs (cf. vLLM's
``GroupCoordinator``): the CPU group (gloo), an optional device group (NCCL),
and a MessageQueue whose writer is group rank ``queue_src``.

* ``broadcast_object(obj, src)``: through the queue when ``src`` is the queue's
  writer (microseconds on one host); from any other ``src``, through
  ``broadcast_object_list`` over the CPU group (correct, slower).
* ``broadcast_tensor_dict(d, src)``: the manifest (keys, non-tensor values and a
  :class:`~verifiedring.distributed.transfer.TensorMeta` per tensor) as one object,
  receivers allocate with ``torch.empty``, then the tensors, coalesced, over
  the groups (:func:`~verifiedring.distributed.transfer.broadcast_tensors`). Receivers
  get a new dict in the sender's key order; the sender gets its own dict back.
* ``broadcast_nested(obj, src, cache)``: path refill of nested metadata
  (:mod:`verifiedring.distributed.paths`); receivers pass their own object of the same
  structure and get it refilled (use the return value: a root tuple is rebuilt).
  With a :class:`~verifiedring.distributed.plan.PlanCache` the per-step cost drops to
  the compiled plan's.

Every call is collective over the group: every rank calls it with the same
``src``, in the same order. ``src`` is a group rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..errors import MisuseError
from .paths import Refill, apply, collect
from .plan import PlanCache, RefillPlan, structure_of
from .transfer import TensorMeta, TransferOptions, broadcast_tensors

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

DEFAULT_MAX_CHUNK_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_CHUNKS = 10


class ObjectChannel(Protocol):
    """What GroupBroadcaster needs of a queue: MessageQueue.broadcast_object."""

    def broadcast_object(self, obj: Any = None) -> Any: ...

    def close(self) -> None: ...


class CollectiveChannel:
    """``broadcast_object_list`` over a group from a fixed source: the baseline
    ``bench/broadcast_object.py`` compares the MessageQueue with, and a stand-in
    for it where none is available."""

    def __init__(self, group: ProcessGroup | None, src: int) -> None:
        import torch.distributed as dist

        self.group = group
        self.is_src = dist.get_rank(group) == src
        self.src_global = src if group is None else dist.get_global_rank(group, src)

    def broadcast_object(self, obj: Any = None) -> Any:
        import torch.distributed as dist

        box = [obj if self.is_src else None]
        dist.broadcast_object_list(box, src=self.src_global, group=self.group)
        return box[0]

    def close(self) -> None:
        pass


class GroupBroadcaster:
    """A process group's broadcasts: see the module doc. ``cpu_group=None`` is the
    default group; ``queue=None`` sends every object by ``broadcast_object_list``."""

    def __init__(
        self,
        cpu_group: ProcessGroup | None = None,
        *,
        queue: ObjectChannel | None = None,
        queue_src: int = 0,
        device_group: ProcessGroup | None = None,
        options: TransferOptions | None = None,
    ) -> None:
        import torch.distributed as dist

        self.cpu_group = cpu_group
        self.device_group = device_group
        self.rank = dist.get_rank(cpu_group)
        self.world_size = dist.get_world_size(cpu_group)
        self.global_ranks: list[int] = (
            list(range(self.world_size))
            if cpu_group is None
            else dist.get_process_group_ranks(cpu_group)
        )
        self.queue = queue
        self.queue_src = queue_src
        self.options = options or TransferOptions()
        self._fallback: dict[int, CollectiveChannel] = {}

    @classmethod
    def create(
        cls,
        cpu_group: ProcessGroup | None = None,
        *,
        writer_rank: int = 0,
        device_group: ProcessGroup | None = None,
        max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
        max_chunks: int = DEFAULT_MAX_CHUNKS,
        options: TransferOptions | None = None,
        timeout: float | None = None,
    ) -> GroupBroadcaster:
        """Collective: build the group's MessageQueue (writer ``writer_rank``) and wrap it."""
        import torch.distributed as dist

        from ..queue import MessageQueue
        from .group import create_from_process_group

        queue = None
        if dist.get_world_size(cpu_group) > 1:
            queue = create_from_process_group(
                MessageQueue, cpu_group, max_chunk_bytes, max_chunks, writer_rank, timeout=timeout
            )
        return cls(
            cpu_group,
            queue=queue,
            queue_src=writer_rank,
            device_group=device_group,
            options=options,
        )

    def close(self) -> None:
        if self.queue is not None:
            self.queue.close()
            self.queue = None

    def __enter__(self) -> GroupBroadcaster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_src(self, src: int) -> None:
        if not 0 <= src < self.world_size:
            raise MisuseError(f"src={src} is not a rank of this group of size {self.world_size}")

    def broadcast_object(self, obj: Any = None, src: int = 0) -> Any:
        """``obj`` from group rank ``src`` to every rank; the sender gets ``obj`` back."""
        self._check_src(src)
        if self.world_size == 1:
            return obj
        if self.queue is not None and src == self.queue_src:
            return self.queue.broadcast_object(obj if self.rank == src else None)
        channel = self._fallback.get(src)
        if channel is None:
            channel = self._fallback[src] = CollectiveChannel(self.cpu_group, src)
        return channel.broadcast_object(obj)

    def _tensors(self, tensors: list[torch.Tensor], metas: list[TensorMeta], src: int) -> None:
        broadcast_tensors(
            tensors,
            metas,
            is_src=self.rank == src,
            src_global=self.global_ranks[src],
            cpu_group=self.cpu_group,
            device_group=self.device_group,
            options=self.options,
        )

    def broadcast_tensor_dict(
        self, tensor_dict: dict[Any, Any] | None = None, src: int = 0
    ) -> dict[Any, Any]:
        """A flat dict of tensors and other values from ``src``; see the module doc."""
        self._check_src(src)
        if self.world_size == 1:
            if tensor_dict is None:
                raise MisuseError("broadcast_tensor_dict: the sender must pass a dict")
            return tensor_dict
        if self.rank == src:
            if not isinstance(tensor_dict, dict):
                raise MisuseError(
                    f"broadcast_tensor_dict: the sender (rank {src}) must pass a dict, "
                    f"got {type(tensor_dict).__name__}"
                )
            tensors = [v for v in tensor_dict.values() if isinstance(v, torch.Tensor)]
            metas = [TensorMeta.of(t) for t in tensors]
            manifest = [
                (k, True, None) if isinstance(v, torch.Tensor) else (k, False, v)
                for k, v in tensor_dict.items()
            ]
            self.broadcast_object((manifest, metas), src)
            self._tensors(tensors, metas, src)
            return tensor_dict
        manifest, metas = self.broadcast_object(None, src)
        tensors = [m.empty() for m in metas]
        out: dict[Any, Any] = {}
        it = iter(tensors)
        for k, is_tensor, v in manifest:
            out[k] = next(it) if is_tensor else v
        self._tensors(tensors, metas, src)
        return out

    def broadcast_nested(self, obj: Any, src: int = 0, cache: PlanCache | None = None) -> Any:
        """Path-refill every rank's ``obj`` from ``src``'s; returns the refilled root.

        With ``cache`` (the same PlanCache on every step, on every rank), the
        first step sends the full Refill and the plan's token, later steps only
        the token, the leaves and the tensor metas.
        """
        self._check_src(src)
        if self.world_size == 1:
            return obj
        if self.rank == src:
            return self._send_nested(obj, src, cache)
        msg = self.broadcast_object(None, src)
        kind = msg[0]
        if kind == "step":
            _, token, leaves, metas = msg
            if cache is None or cache.plan is None or cache.peer_token != token:
                raise MisuseError(
                    f"broadcast_nested on rank {self.rank}: rank {src} sent a step of plan "
                    f"{token} this rank has not compiled; pass the same PlanCache on every "
                    "rank from the first step"
                )
            root, dests = cache.plan.apply(obj, leaves, metas)
        else:
            refill: Refill = msg[-1]
            metas = refill.metas
            root, dests = apply(refill, obj)
            if kind == "plan":
                if cache is None:
                    raise MisuseError(
                        f"broadcast_nested on rank {self.rank}: rank {src} uses a PlanCache; "
                        "pass one here too"
                    )
                plan = RefillPlan(root)
                if plan.structure != structure_of(refill.nodes):
                    raise MisuseError(
                        f"broadcast_nested on rank {self.rank}: the refilled object's plan "
                        "differs from the sender's"
                    )
                cache.plan, cache.peer_token = plan, msg[1]
        self._tensors(dests, metas, src)
        return root

    def _send_nested(self, obj: Any, src: int, cache: PlanCache | None) -> Any:
        if cache is not None and cache.plan is not None:
            leaves, tensors = cache.plan.collect(obj)
            metas = [TensorMeta.of(t) for t in tensors]
            self.broadcast_object(("step", cache.plan.token, leaves, metas), src)
        else:
            refill, tensors = collect(obj)
            metas = refill.metas
            if cache is None:
                self.broadcast_object(("walk", refill), src)
            else:
                cache.plan = RefillPlan(obj)
                self.broadcast_object(("plan", cache.plan.token, refill), src)
        self._tensors(tensors, metas, src)
        return obj


def broadcast_tensor_dict(
    tensor_dict: dict[Any, Any] | None = None,
    src: int = 0,
    group: ProcessGroup | None = None,
    queue: ObjectChannel | None = None,
    *,
    queue_src: int = 0,
    device_group: ProcessGroup | None = None,
    options: TransferOptions | None = None,
) -> dict[Any, Any]:
    """Functional form of :meth:`GroupBroadcaster.broadcast_tensor_dict` (vLLM's signature).

    Prefer keeping one GroupBroadcaster: this builds a throw-away one per call.
    """
    b = GroupBroadcaster(
        group, queue=queue, queue_src=queue_src, device_group=device_group, options=options
    )
    return b.broadcast_tensor_dict(tensor_dict, src)
