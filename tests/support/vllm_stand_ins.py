"""What vLLM's test file reaches of vLLM besides its queue (:mod:`support.vllm_suite`
switches its imports to these).

Importing this module stands in for the rest: ``install()`` makes vLLM's module path
lead to ``verifiedring.compat.vllm`` (so ``mock.patch("vllm.distributed...shm_broadcast.X")``
patches it), over empty parent packages; vLLM's arena module path leads to
``verifiedring.compat.tensor_arena``; the ``vllm`` logger is at INFO, as vLLM's logging
config leaves it.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import sys
import types
from collections import Counter
from datetime import timedelta
from typing import Any

# vLLM's own imports load numpy.random in the process that forks the test's workers, so
# they share its state (test_message_queue_idle_wake draws the same message in each);
# numpy 2 loads it lazily, at first use, seeded anew in each forked worker
import numpy.random  # noqa: F401

from verifiedring.compat import tensor_arena
from verifiedring.compat import vllm as shim

ARENA_MODULE = "vllm.distributed.device_communicators.shm_tensor_arena"


def get_open_port() -> int:
    """vLLM's ``get_open_port``: a TCP port free on this host now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        port: int = s.getsockname()[1]
        return port


def update_environment_variables(envs: dict[str, str]) -> None:
    """vLLM's ``update_environment_variables``: set each variable."""
    os.environ.update(envs)


class StatelessProcessGroup:
    """vLLM's ``StatelessProcessGroup`` surface over a ``torch.distributed.TCPStore``:
    ``rank``, ``world_size``, ``broadcast_obj``, ``all_gather_obj``, ``barrier``."""

    def __init__(self, rank: int, world_size: int, store: Any) -> None:
        self.rank = rank
        self.world_size = world_size
        self.store = store
        self._rounds: Counter[str] = Counter()

    @classmethod
    def create(cls, host: str, port: int, rank: int, world_size: int,
               store_timeout: int = 300) -> StatelessProcessGroup:
        from torch.distributed import TCPStore

        store = TCPStore(host, port, world_size, is_master=rank == 0,
                         timeout=timedelta(seconds=store_timeout))
        return cls(rank, world_size, store)

    def _key(self, kind: str) -> str:
        self._rounds[kind] += 1
        return f"{kind}/{self._rounds[kind]}"

    def broadcast_obj(self, obj: Any, src: int) -> Any:
        key = self._key(f"broadcast/{src}")
        if self.rank == src:
            self.store.set(key, pickle.dumps(obj))
            return obj
        return pickle.loads(self.store.get(key))

    def all_gather_obj(self, obj: Any) -> list[Any]:
        key = self._key("all_gather")
        self.store.set(f"{key}/{self.rank}", pickle.dumps(obj))
        return [pickle.loads(self.store.get(f"{key}/{r}")) for r in range(self.world_size)]

    def barrier(self) -> None:
        """Every rank arrives, then leaves; rank 0 (the store's host) returns last, so
        its exit never closes the store under a rank still in the barrier."""
        key = self._key("barrier")
        for phase in ("arrive", "depart"):
            self.store.set(f"{key}/{phase}/{self.rank}", b"1")
            if phase == "arrive" or self.rank == 0:
                for r in range(self.world_size):
                    self.store.get(f"{key}/{phase}/{r}")


def _stand_in_for_vllm() -> None:
    """Empty parent packages of vLLM's module paths, ``install()``, vLLM's arena module
    path leading to ``verifiedring.compat.tensor_arena``, and the ``vllm`` logger at
    INFO."""
    parts = shim.VLLM_MODULE.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)
            parent, _, leaf = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], leaf, sys.modules[name])
    shim.install()
    sys.modules[ARENA_MODULE] = tensor_arena
    package, _, leaf = ARENA_MODULE.rpartition(".")
    vars(sys.modules[package])[leaf] = tensor_arena
    logging.getLogger("vllm").setLevel(logging.INFO)


_stand_in_for_vllm()
