"""What the host sees of a namespace run: its processes (by namespace id) and its mounts."""

from __future__ import annotations

import contextlib
import json
import os
import select
import time
from collections.abc import Mapping

from .namespace_init import read_text


def proc_children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
    return out


def read_ns_ids(fd: int, deadline: float) -> dict[str, str] | None:
    """The JSON object a starting init writes as one line on ``fd``; None if none came
    by ``deadline`` (monotonic) or the writer closed first."""
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
    ids: dict[str, str] = json.loads(data)
    return ids


def hold_namespaces(pid: int, ids: Mapping[str, str]) -> list[int]:
    """Open files on the namespaces ``ids`` (kind -> link) of process ``pid``, each
    checked to be the one named: while they are open the kernel frees none of them,
    so no later namespace can take their ids. Empty (nothing held) if the process is
    gone or is in other namespaces."""
    held: list[int] = []
    try:
        for kind, ident in ids.items():
            held.append(os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC))
            if os.readlink(f"/proc/self/fd/{held[-1]}") != ident:
                raise ProcessLookupError(pid)
    except OSError:
        for fd in held:
            os.close(fd)
        return []
    return held


def _in_namespace(ns_ids: Mapping[str, str]) -> list[int]:
    """Host pids of live processes in any of the namespaces ``ns_ids`` (kind -> id).
    An exited process not yet reaped (a zombie: its pid namespace link outlives it, the
    others do not) holds nothing but its pid, and is not counted."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        for kind, ident in ns_ids.items():
            try:
                if os.readlink(f"/proc/{entry}/ns/{kind}") == ident and not _exited(entry):
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return found


def _exited(pid: str) -> bool:
    """Whether process ``pid`` has exited and awaits its reaper (state Z or X)."""
    try:
        state = read_text(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # gone meanwhile
    return state in ("Z", "X")


def mounted_under(path: str) -> list[str]:
    """Host mount points at or below ``path``."""
    out: list[str] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            if point == path or point.startswith(path + "/"):
                out.append(point)
    return out


def await_teardown(ids: Mapping[str, str], timeout: float) -> tuple[int, ...]:
    """Host pids still in the namespaces ``ids`` (a namespace's ``ns.json``) once they
    are gone or ``timeout`` seconds have passed: empty unless the kernel misbehaves."""
    if not ids:
        return ()
    ids = {k: v for k, v in ids.items() if k in ("pid_for_children", "mnt", "net")}
    ids["pid"] = ids.pop("pid_for_children", "")
    deadline = time.monotonic() + timeout
    while True:
        left = _in_namespace(ids)
        if not left or time.monotonic() >= deadline:
            return tuple(left)
        time.sleep(0.02)
