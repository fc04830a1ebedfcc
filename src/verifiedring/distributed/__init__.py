"""The torch.distributed layer over :class:`~verifiedring.MessageQueue`.

Importing this package imports neither torch nor zmq; each name below loads its
module (and torch) on first use.

* :func:`create_from_process_group` -- one MessageQueue per process group, any
  writer rank, local readers on the ring and remote readers over TCP.
* :class:`GroupBroadcaster` / :func:`broadcast_tensor_dict` -- a manifest through
  the queue, then tensors over gloo (CPU) and an optional device group, coalesced.
* :func:`collect` / :func:`apply` / :class:`RefillPlan` -- path refill of nested
  metadata (dataclasses, dicts, lists, tuples, tensors) into a receiver's object.
* :class:`WorkerGroup` -- method-call broadcast: ``run_workers`` and ``worker_loop``.

Tools for testing code built on this layer (sample payloads, exact comparisons,
a bounded multiprocess world) live in :mod:`verifiedring.testing`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..hosts import host_identity, writer_connect_ip
    from .broadcaster import (
        CollectiveChannel,
        GroupBroadcaster,
        ObjectChannel,
        broadcast_tensor_dict,
    )
    from .group import create_from_process_group
    from .paths import Refill, apply, collect, format_path, refill
    from .plan import PlanCache, RefillPlan
    from .transfer import TensorMeta, TransferOptions
    from .workers import WorkerGroup

_LAZY = {
    "GroupBroadcaster": "broadcaster",
    "ObjectChannel": "broadcaster",
    "CollectiveChannel": "broadcaster",
    "broadcast_tensor_dict": "broadcaster",
    "create_from_process_group": "group",
    "host_identity": "group",
    "writer_connect_ip": "group",
    "PlanCache": "plan",
    "Refill": "paths",
    "RefillPlan": "plan",
    "apply": "paths",
    "collect": "paths",
    "format_path": "paths",
    "refill": "paths",
    "TensorMeta": "transfer",
    "TransferOptions": "transfer",
    "WorkerGroup": "workers",
}

__all__ = [
    "CollectiveChannel",
    "GroupBroadcaster",
    "ObjectChannel",
    "PlanCache",
    "Refill",
    "RefillPlan",
    "TensorMeta",
    "TransferOptions",
    "WorkerGroup",
    "apply",
    "broadcast_tensor_dict",
    "collect",
    "create_from_process_group",
    "format_path",
    "host_identity",
    "refill",
    "writer_connect_ip",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
