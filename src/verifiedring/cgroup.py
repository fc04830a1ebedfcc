"""The memory cgroup's headroom: pages of ``/dev/shm`` count against it.

A container's tmpfs pages are charged to the memory cgroup of the process that
touches them, so a segment that fits ``/dev/shm`` can still push the container
over its memory limit (the OOM killer, not an error). Before a segment is made,
:func:`check_cgroup_memory_available` reads this process's own cgroup (from
``/proc/self/cgroup``): v2 ``memory.max`` minus ``memory.current``, v1
``memory.limit_in_bytes`` minus ``memory.usage_in_bytes``; ``max`` or v1's
unlimited sentinel is no limit. As vLLM's check, too little headroom is a
WARNING, not a refusal: cgroup usage includes reclaimable page cache.

The paths are parameters, so a test feeds it a fake cgroup tree.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

logger = logging.getLogger("verifiedring")

PROC_SELF_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
#: cgroup v1 reports "no limit" as a page-counter maximum near 2**63.
V1_UNLIMITED = 1 << 62
__all__ = ["CGROUP_ROOT", "PROC_SELF_CGROUP", "Headroom", "check_cgroup_memory_available",
           "memory_headroom"]


@dataclass(frozen=True)
class Headroom:
    """The memory cgroup's limit and usage, in bytes, and where they were read."""

    limit: int
    usage: int
    path: str

    @property
    def available(self) -> int:
        return max(0, self.limit - self.usage)


def _read_int(path: str) -> int | None:
    """The integer in ``path``; ``None`` if absent, unreadable, empty or ``max``."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _memory_cgroups(proc_self_cgroup: str) -> tuple[str | None, str | None]:
    """This process's v2 cgroup path and v1 memory cgroup path (``None`` if absent)."""
    v2 = v1 = None
    try:
        with open(proc_self_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _within(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def memory_headroom(
    proc_self_cgroup: str = PROC_SELF_CGROUP, root: str = CGROUP_ROOT
) -> Headroom | None:
    """This process's memory cgroup limit and usage; ``None`` without a limit (no
    cgroup, no memory controller, ``max``, v1's unlimited sentinel, unreadable)."""
    v2, v1 = _memory_cgroups(proc_self_cgroup)
    if v1 is not None:
        base = _within(os.path.join(root, "memory"), v1)
        limit = _read_int(os.path.join(base, "memory.limit_in_bytes"))
        usage = _read_int(os.path.join(base, "memory.usage_in_bytes"))
        if limit is not None and limit < V1_UNLIMITED and usage is not None:
            return Headroom(limit, usage, base)
        return None
    if v2 is not None:
        base = _within(root, v2)
        limit = _read_int(os.path.join(base, "memory.max"))
        usage = _read_int(os.path.join(base, "memory.current"))
        if limit is not None and usage is not None:
            return Headroom(limit, usage, base)
    return None


def check_cgroup_memory_available(
    required_bytes: int, allocation_name: str = "shared-memory allocation", *,
    proc_self_cgroup: str = PROC_SELF_CGROUP, root: str = CGROUP_ROOT,
) -> Headroom | None:
    """Log a WARNING if the memory cgroup has less headroom than ``required_bytes``
    (DEBUG if it has enough); returns what was read (``None``: no limit)."""
    room = memory_headroom(proc_self_cgroup, root)
    if room is None:
        return None
    mib = 1 << 20
    short = room.available < required_bytes
    logger.log(
        logging.WARNING if short else logging.DEBUG,
        "memory cgroup %s for %s: %.1f MiB required, %.1f MiB available "
        "(limit %.1f MiB, usage %.1f MiB)%s",
        room.path, allocation_name, required_bytes / mib, room.available / mib,
        room.limit / mib, room.usage / mib,
        ": the segment's pages count against the limit; the allocation is still "
        "attempted, as cgroup usage may be reclaimable" if short else "",
    )
    return room
