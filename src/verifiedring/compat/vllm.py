"""vLLM's ``shm_broadcast`` names, backed by verifiedring.

Either import the names from here, or switch an engine with one line before it
builds its executor::

    import verifiedring.compat.vllm as shim; shim.install()

:func:`install` makes ``vllm.distributed.device_communicators.shm_broadcast``
resolve to this module (and, if that module was imported already, points its
names here), so every ``from ...shm_broadcast import MessageQueue`` gets
verifiedring's. The differences from vLLM's behaviour are in the README's
compatibility table. Importing this module adds vLLM's queue attributes
(:mod:`.attributes`) and the static ``MessageQueue.recv``.
"""

from __future__ import annotations

import os
import pickle
import sys
from types import ModuleType
from typing import Any

from ..errors import RingTimeoutError, SharedMemoryFullError
from ..ordering import fence as memory_fence
from ..queue import Handle, MessageQueue
from ..ring import ShmRingBuffer
from ..shm import SHM_DIR, check_room
from .attributes import add_vllm_attributes

VLLM_MODULE = "vllm.distributed.device_communicators.shm_broadcast"
SHM_PATH = SHM_DIR
__all__ = [
    "SHM_PATH",
    "Handle",
    "MessageQueue",
    "SharedMemoryFullError",
    "ShmRingBuffer",
    "check_shm_free_space",
    "install",
    "memory_fence",
]


def check_shm_free_space(
    required_bytes: int, shm_path: str = SHM_PATH, *,
    allocation_name: str = "shared-memory allocation",
) -> None:
    """vLLM's check: a ``RuntimeError`` ("Insufficient space in ...") naming the sizes."""
    check_room(required_bytes, shm_path, allocation_name)


def recv(socket: Any, timeout: float | None) -> Any:
    """vLLM's static ``MessageQueue.recv``: the next multipart message on the zmq
    ``socket``, unpickled with its other parts as out-of-band buffers. ``timeout``
    in seconds (``None``: no bound; below 0: 0); nothing by then is a
    :class:`RingTimeoutError` (a ``TimeoutError``)."""
    timeout_ms = None if timeout is None else max(0, int(timeout * 1000))
    if not socket.poll(timeout=timeout_ms):
        raise RingTimeoutError(f"pid {os.getpid()}: no message on the socket in {timeout} s")
    first, *rest = socket.recv_multipart(copy=False)
    return pickle.loads(first, buffers=rest)


def install() -> ModuleType:
    """Make vLLM's ``shm_broadcast`` module path resolve to this module; returns it."""
    me = sys.modules[__name__]
    previous = sys.modules.get(VLLM_MODULE)
    if previous is not None and previous is not me:
        for name in __all__:
            if name != "install":
                setattr(previous, name, getattr(me, name))
    else:
        sys.modules[VLLM_MODULE] = me
    return me


add_vllm_attributes()
if "recv" not in MessageQueue.__dict__:
    MessageQueue.recv = staticmethod(recv)  # type: ignore[attr-defined]
