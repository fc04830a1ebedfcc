"""Names on the filesystem that outlive a crash, and how they are reaped.

A ring's segment (``/dev/shm/vr_<pid>_<token>``) and a queue's ipc directory
(``<tmp>/vr-mq-<pid>-<token>``) carry the creator's pid, for people to read.
They exist only until the queue's handshake completes (then every reader has
attached and the writer removes both names), so a crash can leave one only
before that. Each create reaps the entries of creators that are gone;
``python -m verifiedring cleanup`` lists and removes them by hand.

Whether a creator is gone is not judged by its pid: processes in other PID
namespaces (containers sharing ``/dev/shm`` with ``--ipc=host``, pods sharing
an ``emptyDir``) have pids this one cannot see, or sees as other processes.
The creator holds an exclusive ``flock`` on each entry (:func:`hold`) from
right after making it until it closes it; the kernel keeps that lock on the
file itself, across namespaces, and drops it when the creator exits, however
it exits. An entry is stale when nobody holds its lock (:func:`in_use`) and it
is complete: a segment with a size, an ipc directory with its socket in it
(the creator locks it before either); an empty one is stale only after
:data:`CREATE_GRACE` seconds, the time it may take a creator to lock it.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass

SHM_DIR = "/dev/shm"
SEGMENT_PREFIX = "vr_"
IPC_PREFIX = "vr-mq-"
_SEGMENT = re.compile(rf"^{SEGMENT_PREFIX}(\d+)_[0-9a-f]+$")
_IPC = re.compile(rf"^{IPC_PREFIX}(\d+)-[0-9a-f]+$")
#: How long an empty entry may stay unlocked while its creator is still making it.
CREATE_GRACE = 10.0


def segment_name() -> str:
    """A fresh segment name carrying this process's pid."""
    return f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(8)}"


def ipc_directory() -> tuple[str, int]:
    """A fresh private (0700) directory for an ipc endpoint, named with this pid, and
    a descriptor holding its lock (:func:`hold`): close it once the directory is gone."""
    while True:
        path = os.path.join(
            tempfile.gettempdir(), f"{IPC_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
        )
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            hold(fd)
        except BaseException:
            os.close(fd)
            raise
        return path, fd


def hold(fd: int) -> None:
    """Mark the entry open on ``fd`` as in use by this process until ``fd`` is closed,
    by any process in any PID namespace that reads :func:`in_use`."""
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def in_use(path: str) -> bool:
    """Whether some process holds the lock of the entry at ``path`` (:func:`hold`)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_DIRECTORY if os.path.isdir(path) else 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # not ours to open (another user's, or no longer what it was)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # and with it the shared lock just taken
    return False


def _complete(path: str) -> bool:
    """A segment with a size or an ipc directory with its socket, or an empty one
    older than :data:`CREATE_GRACE` (its creator locks it before filling it)."""
    try:
        st = os.stat(path, follow_symlinks=False)
        filled = bool(os.listdir(path)) if os.path.isdir(path) else st.st_size > 0
    except OSError:
        return False
    return filled or time.time() - st.st_ctime >= CREATE_GRACE


@dataclass(frozen=True)
class Leftover:
    """One stale entry: its path, and the pid its creator had (in its PID namespace)."""

    path: str
    pid: int


def stale(shm_dir: str = SHM_DIR, tmp_dir: str | None = None) -> list[Leftover]:
    """Entries of this library that nobody holds (see the module's docstring)."""
    out: list[Leftover] = []
    for directory, pattern in ((shm_dir, _SEGMENT), (tmp_dir or tempfile.gettempdir(), _IPC)):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            m = pattern.match(name)
            path = os.path.join(directory, name)
            if m and _complete(path) and not in_use(path):
                out.append(Leftover(path, int(m.group(1))))
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
