"""vLLM's (and SGLang's) ``shm_broadcast`` names, backed by verifiedring.

Either import the names from here, or switch an engine with one line before it
builds its executor::

    import verifiedring.compat.vllm as shim; shim.install()

:func:`install` makes ``vllm.distributed.device_communicators.shm_broadcast``
and ``sglang.srt.distributed.device_communicators.shm_broadcast`` resolve to
this module (and, where one was imported already, points its names here), so
every ``from ...shm_broadcast import MessageQueue`` gets verifiedring's. It also
routes verifiedring's log records to the engine's logger (:mod:`.logs`), and
makes the queue read the names engines' tests patch, at call time:

* ``VLLM_RINGBUFFER_WARNING_INTERVAL`` (``SGLANG_RINGBUFFER_WARNING_INTERVAL``
  after ``install("sglang")``): the stall-log interval of each end built later;
* ``shutil`` (``shutil.disk_usage``) and ``check_cgroup_memory_available``: the
  room check before every segment is made (:func:`check_shm_free_space`);
* ``_reduce_tensor`` (the queue's one tensor rule, re-exported): what ``enqueue``
  calls for each tensor the arena declines. Queue readers' arenas enter
  ``_TENSOR_ARENAS`` as they attach (vLLM's arena names: :mod:`.tensor_arena`).
* ``SHM_READER_RECHECK_INTERVAL_MS`` (and the warning interval): how long one idle
  block of a local reader lasts at most (:mod:`.spin`), read at every block.
* ``REMOTE_POLL_WAIT_MS`` (vLLM 0.34): how long a remote reader's
  ``spin_until_readable`` polls its socket, read at each call; ``SHM_NOTIFY_POLL_INTERVAL_S``
  (0.33): how often ``_spin_condition.record_read`` polls the (stand-in) notify socket.

A stalled wait logs at vLLM's level (INFO) in vLLM's words ("No available shared
memory broadcast block found in N seconds", N the warning interval), with
verifiedring's detail after them.

``MessageQueue`` and ``ShmRingBuffer`` here are subclasses of verifiedring's carrying
vLLM's attributes and the static ``MessageQueue.recv`` (:mod:`.attributes`); importing
this module changes no core class. The differences from vLLM's behaviour are in the
README's compatibility table.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from types import ModuleType
from typing import Any

from ..cgroup import check_cgroup_memory_available
from ..engine import EnginePolicy, StallWording, set_engine_policy
from ..errors import MisuseError, SharedMemoryFullError
from ..ordering import fence as memory_fence
from ..queue import Handle
from ..queue.readiness import REMOTE_POLL_WAIT_MS as REMOTE_POLL_WAIT_MS_DEFAULT
from ..queue.serialization import rebuild_tensor as _rebuild_tensor
from ..queue.serialization import reduce_tensor as _reduce_tensor
from ..shm import SHM_DIR, no_room
from ..waiting import STALL_MESSAGE
from . import spin
from .attributes import VllmQueue as MessageQueue
from .attributes import VllmRingBuffer as ShmRingBuffer
from .logs import forward_to, stop_forwarding
from .tensor_arena import _ARENA_MIN_BYTES, _TENSOR_ARENAS, ShmTensorArena, _ArenaPickler
from .tensor_arena import register as _register_reader_arena

VLLM_MODULE = "vllm.distributed.device_communicators.shm_broadcast"
SGLANG_MODULE = "sglang.srt.distributed.device_communicators.shm_broadcast"
#: The module each engine imports, and the level it logs a stalled wait at.
ENGINES = {"vllm": (VLLM_MODULE, logging.INFO), "sglang": (SGLANG_MODULE, logging.WARNING)}
SHM_PATH = SHM_DIR
#: Seconds between stall lines, as each engine reads its variable (default 60).
VLLM_RINGBUFFER_WARNING_INTERVAL = int(os.environ.get("VLLM_RINGBUFFER_WARNING_INTERVAL", "60"))
SGLANG_RINGBUFFER_WARNING_INTERVAL = int(
    os.environ.get("SGLANG_RINGBUFFER_WARNING_INTERVAL", "60")
)
#: The most milliseconds an idle local reader blocks before it re-reads the ring.
SHM_READER_RECHECK_INTERVAL_MS = 5000
#: How long a remote reader's ``spin_until_readable`` polls its socket (ms), read at
#: each call (vLLM 0.34's name; :mod:`verifiedring.queue.readiness`).
REMOTE_POLL_WAIT_MS = REMOTE_POLL_WAIT_MS_DEFAULT
#: How often a busy local reader polls its notify socket (vLLM 0.33's name, read at each
#: read): verifiedring's readers sleep on a futex word, so the notify socket is a
#: stand-in that never queues anything (:mod:`.spin`).
SHM_NOTIFY_POLL_INTERVAL_S = 2.0
#: A stalled wait, in vLLM's words (its interval, then verifiedring's detail).
VLLM_STALL_MESSAGE = (
    "No available shared memory broadcast block found in %d seconds (the warning "
    "interval): a peer process is hung or busy with long work; " + STALL_MESSAGE
)
__all__ = [
    "REMOTE_POLL_WAIT_MS",
    "SGLANG_RINGBUFFER_WARNING_INTERVAL",
    "SHM_NOTIFY_POLL_INTERVAL_S",
    "SHM_PATH",
    "SHM_READER_RECHECK_INTERVAL_MS",
    "VLLM_RINGBUFFER_WARNING_INTERVAL",
    "_ARENA_MIN_BYTES",
    "_TENSOR_ARENAS",
    "Handle",
    "MessageQueue",
    "SharedMemoryFullError",
    "ShmRingBuffer",
    "ShmTensorArena",
    "_ArenaPickler",
    "_rebuild_tensor",
    "_reduce_tensor",
    "check_cgroup_memory_available",
    "check_shm_free_space",
    "install",
    "memory_fence",
    "shutil",
    "uninstall",
]
_me = sys.modules[__name__]
_engine = "vllm"  # whose variable, logger and levels: the last install()'s


def check_shm_free_space(
    required_bytes: int, shm_path: str = SHM_PATH, *,
    allocation_name: str = "shared-memory allocation",
) -> None:
    """vLLM's check: ``SharedMemoryFullError`` (a ``RuntimeError``, "Insufficient
    space in ...") if ``shutil.disk_usage(shm_path)`` has too little free (skipped
    where ``shm_path`` is no directory); then ``check_cgroup_memory_available``.
    Both names are looked up in this module at each call."""
    if os.path.isdir(shm_path):
        free = _me.shutil.disk_usage(shm_path).free
        if required_bytes > free:
            raise no_room(required_bytes, free, shm_path, allocation_name)
    _me.check_cgroup_memory_available(required_bytes, allocation_name)


def _room_check(size: int, directory: str, what: str) -> None:
    _me.check_shm_free_space(size, directory, allocation_name=what)


def _warning_interval() -> float:
    name = f"{_engine.upper()}_RINGBUFFER_WARNING_INTERVAL"
    value = getattr(_me, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise MisuseError(f"{name}={value!r} must be a number of seconds > 0")
    return float(value)


def _recheck_ms() -> float:
    value = _me.SHM_READER_RECHECK_INTERVAL_MS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise MisuseError(f"SHM_READER_RECHECK_INTERVAL_MS={value!r} must be a number > 0")
    return float(value)


def _remote_poll_ms() -> float:
    value = _me.REMOTE_POLL_WAIT_MS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise MisuseError(f"REMOTE_POLL_WAIT_MS={value!r} must be a number of ms >= 0")
    return float(value)


def _notify_poll_s() -> float:
    value = _me.SHM_NOTIFY_POLL_INTERVAL_S
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise MisuseError(f"SHM_NOTIFY_POLL_INTERVAL_S={value!r} must be a number of s >= 0")
    return float(value)


def _vllm_stall(args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    return VLLM_STALL_MESSAGE, (int(_warning_interval()), *args)


#: Per engine: how it words a stalled wait (``None``: verifiedring's words).
_WORDING: dict[str, StallWording | None] = {"vllm": _vllm_stall, "sglang": None}


def _reduce_by_name(t: Any) -> Any:
    """The queue's tensor reducer after install(): this module's ``_reduce_tensor``,
    looked up at each tensor (a ``mock.patch`` of it is what enqueue calls)."""
    return _me._reduce_tensor(t)


def install(engine: str = "vllm") -> ModuleType:
    """Make vLLM's and SGLang's ``shm_broadcast`` module paths resolve to this
    module; ``engine`` ("vllm" or "sglang") picks whose warning variable, logger
    and log levels apply. Returns this module.

    For each path: ``sys.modules`` and the parent package's attribute (where the
    package is imported) lead here, so ``mock.patch("<path>.NAME")`` patches this
    module; an engine module imported earlier gets this module's names, for code
    that already holds it. :func:`uninstall` gives all of it back."""
    global _engine
    if engine not in ENGINES:
        raise MisuseError(f"install({engine!r}): the engines are {sorted(ENGINES)}")
    for path, _ in ENGINES.values():
        _point_here(path)
    _engine = engine
    policy = EnginePolicy(
        room_check=_room_check, log_interval=_warning_interval, tensor_reducer=_reduce_by_name,
        arena_attach=_register_reader_arena, stall_wording=_WORDING[engine],
        wait_after_shutdown=True,
    )
    set_engine_policy(policy)
    forward_to(*ENGINES[engine], policy.stall_wording)
    return _me


#: path -> (the module it resolved to before install(), the names install() replaced
#: in that module with their old values)
_replaced: dict[str, tuple[ModuleType | None, dict[str, Any]]] = {}
_MISSING = object()


def _point_here(path: str) -> None:
    previous = sys.modules.get(path)
    if previous is _me:
        return
    saved: dict[str, Any] = {}
    if previous is not None:
        for name in __all__:
            if name not in ("install", "uninstall"):
                saved[name] = getattr(previous, name, _MISSING)
                setattr(previous, name, getattr(_me, name))
    _replaced[path] = (previous, saved)
    sys.modules[path] = _me
    _set_in_parent(path, _me)


def _set_in_parent(path: str, module: ModuleType | None) -> None:
    parent, _, leaf = path.rpartition(".")
    package = sys.modules.get(parent)
    if package is None:
        return
    if module is None:
        if getattr(package, leaf, None) is _me:
            delattr(package, leaf)
    else:
        setattr(package, leaf, module)


def _give_back(path: str) -> None:
    if sys.modules.get(path) is not _me:
        return
    previous, saved = _replaced.pop(path, (None, {}))
    if previous is None:
        del sys.modules[path]
    else:
        sys.modules[path] = previous
        for name, value in saved.items():
            if value is _MISSING:
                delattr(previous, name)
            else:
                setattr(previous, name, value)
    _set_in_parent(path, previous)


def uninstall() -> None:
    """Undo :func:`install`: each module path resolves to what it did before (the
    module and its names as they were, or nothing), the queue's room check and
    warning interval are the core's again, and the library's log records propagate
    as before; the engine whose names are read is vLLM's again."""
    global _engine
    for path, _ in ENGINES.values():
        _give_back(path)
    _engine = "vllm"
    set_engine_policy(None)
    stop_forwarding()


spin.use_sources(_recheck_ms, _warning_interval, _notify_poll_s, _remote_poll_ms)
