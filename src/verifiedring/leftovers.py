"""Names on the filesystem that outlive a crash, and how they are reaped.

A ring's segment (``/dev/shm/vr_<pid>_<token>``) and a queue's ipc directory
(``<tmp>/vr-mq-<pid>-<token>``) carry the creator's pid. They exist only
until the queue's handshake completes (then every reader has attached and the
writer removes both names), so a crash can leave one only before that. Each
create reaps the entries of creators that are no longer alive;
``python -m verifiedring cleanup`` lists and removes them by hand.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from dataclasses import dataclass

SHM_DIR = "/dev/shm"
SEGMENT_PREFIX = "vr_"
IPC_PREFIX = "vr-mq-"
_SEGMENT = re.compile(rf"^{SEGMENT_PREFIX}(\d+)_[0-9a-f]+$")
_IPC = re.compile(rf"^{IPC_PREFIX}(\d+)-[0-9a-f]+$")


def segment_name() -> str:
    """A fresh segment name carrying this process's pid."""
    return f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(8)}"


def ipc_directory() -> str:
    """A fresh private (0700) directory for an ipc endpoint, named with this pid."""
    while True:
        path = os.path.join(
            tempfile.gettempdir(), f"{IPC_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        )
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running (in this pid namespace); an exited process
    that its parent has not reaped yet (a zombie) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: the signal test is all there is
    return state not in (b"Z", b"X")


@dataclass(frozen=True)
class Leftover:
    """One stale entry: its path, and the pid of its (dead) creator."""

    path: str
    pid: int


def stale(shm_dir: str = SHM_DIR, tmp_dir: str | None = None) -> list[Leftover]:
    """Entries of this library whose creator is no longer alive."""
    out: list[Leftover] = []
    for directory, pattern in ((shm_dir, _SEGMENT), (tmp_dir or tempfile.gettempdir(), _IPC)):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            m = pattern.match(name)
            if m and not alive(int(m.group(1))):
                out.append(Leftover(os.path.join(directory, name), int(m.group(1))))
    return out


def remove(entry: Leftover) -> bool:
    """Remove one stale entry; false if it was already gone."""
    try:
        if os.path.isdir(entry.path):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    except FileNotFoundError:
        return False
    return True


def reap(shm_dir: str = SHM_DIR, tmp_dir: str | None = None) -> list[Leftover]:
    """Remove every stale entry; return those removed."""
    return [e for e in stale(shm_dir, tmp_dir) if remove(e)]
