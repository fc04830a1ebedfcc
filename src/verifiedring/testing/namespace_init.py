"""The init of a :mod:`verifiedring.testing.namespaces` run: pid 1 inside the namespace.

Run as a script (``python -S namespace_init.py --init WORK IDS_FD HELD_FD`` or
``--call WORK``) by
:class:`~verifiedring.testing.namespaces.Namespace`; it imports nothing of this
package, only the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from typing import Any


def read_text(path: str) -> str:
    """A file's text, or "" if it does not exist (a /proc entry of a gone process)."""
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.mount(
        source.encode(), target.encode(), None if fstype is None else fstype.encode(),
        ctypes.c_ulong(flags), None if data is None else data.encode(),
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target} ({fstype}, {data}): {os.strerror(err)}")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, req + b"\0" * 22)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP) + b"\0" * 22)


def _listing(top: str) -> list[str]:
    out: list[str] = []
    for root, dirs, files in os.walk(top):
        rel = os.path.relpath(root, top)
        for d in dirs:
            out.append(os.path.normpath(os.path.join(rel, d)) + "/")
        for name in files:
            out.append(os.path.normpath(os.path.join(rel, name)))
    return sorted(out)


def _cmdline(pid: int) -> str:
    raw = read_text(f"/proc/{pid}/cmdline")
    return f"pid {pid}: " + (raw.replace("\0", " ").strip() or "?")


def _others() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]


def _reap(target: int, status: list[int]) -> bool:
    """Reap every exited child without blocking; true while any child remains."""
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        if pid == target:
            status.append(st)


def _read_config(work: str) -> dict[str, Any]:
    """The run's instructions (config.json)."""
    with open(os.path.join(work, "config.json")) as f:
        cfg: dict[str, Any] = json.load(f)
    return cfg


def _await_hold(ids_fd: int, held_fd: int) -> None:
    """Tell the host the namespace ids (a JSON line on ``ids_fd``), then wait for its
    one byte on ``held_fd``: the host has opened the namespaces, so their ids stay this
    run's until it has seen every process of the run gone. No byte (the host gave up
    or died) ends the run here, before it has done anything."""
    ids = {k: os.readlink(f"/proc/self/ns/{k}") for k in ("pid_for_children", "mnt", "net")}
    os.write(ids_fd, (json.dumps(ids) + "\n").encode())
    os.close(ids_fd)
    held = os.read(held_fd, 1)
    os.close(held_fd)
    if held != b"h":
        sys.exit("the host never held the namespaces; not starting the run")


def _mount_all(work: str, cfg: Mapping[str, Any]) -> None:
    """Private mounts, the tmpfs of /dev/shm and the tmpdir, hostname, loopback, hosts."""
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"size={cfg['shm_bytes']},mode=1777")
    _mount("tmpfs", cfg["tmpdir"], "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"size={cfg['tmp_bytes']},mode=1777")
    socket.sethostname(cfg["hostname"])
    _loopback_up()
    if cfg["hosts"]:
        hosts = os.path.join(work, "hosts")
        with open("/etc/hosts") as f:
            base = f.read()
        lines = "".join(f"{addr} {name}\n" for name, addr in cfg["hosts"].items())
        with open(hosts, "w") as f:
            f.write(base.rstrip("\n") + "\n" + lines)
        _mount(hosts, "/etc/hosts", None, _MS_BIND, None)


def _await_release(work: str, cfg: Mapping[str, Any]) -> None:
    """A gated run waits for the ``go`` file (at most the timeout)."""
    if not cfg["gated"]:
        return
    deadline = time.monotonic() + cfg["timeout"]
    while not os.path.exists(os.path.join(work, "go")):
        if time.monotonic() >= deadline:
            raise TimeoutError("never released")
        time.sleep(0.01)


def _run_setup(cfg: Mapping[str, Any]) -> None:
    for command in cfg["setup"]:
        done = subprocess.run(command, capture_output=True, timeout=cfg["timeout"], text=True)
        if done.returncode != 0:
            raise RuntimeError(f"setup {command} exited {done.returncode}: {done.stderr}")


def _start_target(cfg: Mapping[str, Any]) -> int:
    """Fork and exec the target; its pid."""
    target = os.fork()
    if target == 0:  # the target
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            os.chdir(cfg["cwd"])
            os.execvpe(cfg["argv"][0], cfg["argv"], cfg["env"])
        finally:
            os._exit(127)
    return target


def _await_target(target: int, deadline: float, status: list[int]) -> bool:
    """Reap until the target exits (its status appended to ``status``); false on timeout."""
    while True:
        _reap(target, status)
        if status:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        signal.sigtimedwait({signal.SIGCHLD}, min(left, 0.5))


def _settle(target: int, status: list[int], settle: float) -> None:
    """Reap the target's leftover children for up to ``settle`` seconds."""
    settle_until = time.monotonic() + settle
    while _reap(target, status) and time.monotonic() < settle_until:
        signal.sigtimedwait({signal.SIGCHLD}, 0.05)


def _init(work: str, ids_fd: int, held_fd: int) -> int:
    """pid 1 of the namespace: be held, set up, run the target, settle, list, report."""
    _await_hold(ids_fd, held_fd)
    cfg = _read_config(work)
    report: dict[str, Any] = {"returncode": None, "timed_out": False, "elapsed": 0.0}
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        _mount_all(work, cfg)
        _await_release(work, cfg)
        _run_setup(cfg)
    except Exception as exc:
        report["setup_error"] = f"{type(exc).__name__}: {exc}"
        return _finish(work, cfg, report)
    t0 = time.monotonic()
    target = _start_target(cfg)
    status: list[int] = []
    if not _await_target(target, t0 + cfg["timeout"], status):
        report["timed_out"] = True
    report["elapsed"] = time.monotonic() - t0
    if status:
        report["returncode"] = os.waitstatus_to_exitcode(status[0])
        _settle(target, status, cfg["settle"])
    return _finish(work, cfg, report)


def _finish(work: str, cfg: Mapping[str, Any], report: dict[str, Any]) -> int:
    others = _others()
    report["stragglers"] = [_cmdline(p) for p in others]
    if others:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)  # pid 1: every other process of the namespace
        until = time.monotonic() + 5.0
        while _others() and time.monotonic() < until:
            _reap(0, [])
            time.sleep(0.01)
    report["shm_left"] = _listing("/dev/shm")
    report["tmp_left"] = _listing(cfg["tmpdir"])
    tmp = os.path.join(work, "report.json.tmp")
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.rename(tmp, os.path.join(work, "report.json"))
    return 0


def _call(work: str) -> int:
    """The target of :func:`run_callable`: unpickle the call, run it, pickle the outcome."""
    with open(os.path.join(work, "call.pkl"), "rb") as f:
        fn, args, kwargs = pickle.load(f)
    code = 0
    try:
        outcome: tuple[str, Any] = ("ok", fn(*args, **kwargs))
    except BaseException:
        outcome, code = ("raised", traceback.format_exc()), 1
    try:
        data = pickle.dumps(outcome)
    except Exception:
        data = pickle.dumps(("raised", "the value could not be pickled:\n" +
                             traceback.format_exc()))
        code = 1
    with open(os.path.join(work, "result.pkl"), "wb") as f:
        f.write(data)
    return code


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # this file's directory is no package root
    if len(sys.argv) == 5 and sys.argv[1] == "--init":
        sys.exit(_init(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    if len(sys.argv) == 3 and sys.argv[1] == "--call":
        sys.exit(_call(sys.argv[2]))
    sys.exit(f"usage: {sys.argv[0]} --init WORK IDS_FD HELD_FD | --call WORK (used by Namespace)")
