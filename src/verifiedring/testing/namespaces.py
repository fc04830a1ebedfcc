"""Run a command or a Python callable in fresh Linux namespaces, bounded, with what it left.

Each run gets its own mount, network, UTS, IPC and PID namespaces (``unshare
--mount --net --uts --ipc --pid --fork``): a private tmpfs of a chosen size on
``/dev/shm``, a private tmpfs as ``TMPDIR``, only a loopback interface (up),
its own host name and, optionally, its own ``/etc/hosts``. So a test can fill
``/dev/shm`` without touching the host, and everything left in ``/dev/shm``
or ``TMPDIR`` at the end is the run's own.

Inside, a small init (:mod:`.namespace_init` run as a script, pid 1 of the namespace)
sets the namespace up, runs the target as its child, reaps every process that
is re-parented to it, and at the end -- the target exited, or the time ran
out -- gives the remaining processes ``settle`` seconds, SIGKILLs the
stragglers, then lists ``/dev/shm`` and ``TMPDIR`` *from inside* before the
namespace goes away. The PID namespace is what makes the clean-up total:
when its init exits, the kernel kills every process left in it, and with it
the mounts go. After each run the host checks that no process of the
namespace remains (:attr:`NamespaceResult.lingering`, always empty unless
the kernel misbehaves) and that none of the run's mounts is visible on the
host.

API
---
* :func:`namespaces_available` / :func:`unavailable_reason` -- the probe
  (root, Linux, ``unshare``, and a real trial run); tests skip with the reason.
* :func:`run_command` (any argv), :func:`run_script` (``python ARGS``) and
  :func:`run_callable` (``fn(*args, **kwargs)``, its return value or its
  traceback pickled back) -- one bounded run, a :class:`NamespaceResult`.
* :class:`Namespace` -- the same in steps: :meth:`~Namespace.start`,
  optionally ``gated`` so the host can configure the namespace (e.g. move one
  end of a veth pair into :attr:`~Namespace.netns_path`) before
  :meth:`~Namespace.release` lets the ``setup`` commands and the target run,
  then :meth:`~Namespace.finish`; :meth:`Namespace.calling` makes one whose target
  is a callable. :mod:`.multihost` builds several hosts joined by veth pairs on this.

Only the standard library is imported (neither torch nor zmq), and the init
imports nothing of this package.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .namespace_init import read_text
from .ns_host import await_teardown, hold_namespaces, mounted_under, proc_children, read_ns_ids
from .sandbox import MIB, NamespaceResult, Sandbox

__all__ = [
    "MIB",
    "Namespace",
    "NamespaceResult",
    "Sandbox",
    "namespaces_available",
    "run_callable",
    "run_command",
    "run_script",
    "unavailable_reason",
]

#: How long the host waits for the namespace's processes to be gone after its init exits.
TEARDOWN_TIMEOUT = 5.0
#: How long the host waits for a starting namespace's init to report its ids.
HOLD_TIMEOUT = 10.0
#: The namespace's init, run by path (it imports nothing of this package).
INIT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "namespace_init.py")
UNSHARE = (
    "unshare", "--mount", "--net", "--uts", "--ipc", "--pid", "--fork", "--kill-child",
    "--mount-proc", "--propagation", "private",
)


class Namespace:
    """One run of ``argv`` in fresh namespaces, in steps (see the module docstring).

    Use as a context manager, or call :meth:`finish` (or :meth:`kill`): either
    way the namespace is gone and its work directory removed afterwards.
    """

    def __init__(self, argv: Sequence[str], sandbox: Sandbox | None = None, *,
                 gated: bool = False) -> None:
        self.argv = list(argv)
        self.sandbox = sandbox or Sandbox()
        self.gated = gated
        base = "/tmp" if os.path.isdir("/tmp") else None  # short: ipc paths have a limit
        #: Host directory of the run: config, report, output; ``tmp`` is TMPDIR's mount point.
        self.work = tempfile.mkdtemp(prefix="vr-ns-", dir=base)
        self.tmpdir = os.path.join(self.work, "tmp")
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = 0.0
        self._result: NamespaceResult | None = None
        #: The namespace ids (kind -> ``/proc/<pid>/ns/<kind>`` link) and the open files
        #: that hold them from the start until the teardown is seen done.
        self._ids: dict[str, str] = {}
        self._held: list[int] = []

    @classmethod
    def calling(cls, fn: Callable[..., Any], *args: Any, sandbox: Sandbox | None = None,
                gated: bool = False, **kwargs: Any) -> Namespace:
        """A namespace (not started) whose target is ``fn(*args, **kwargs)``, as in
        :func:`run_callable`; its result carries the value or the traceback."""
        ns = cls([sys.executable, INIT_SCRIPT, "--call"], _with_path(sandbox or Sandbox()),
                 gated=gated)
        with open(ns._path("call.pkl"), "wb") as f:
            pickle.dump((fn, args, kwargs), f)
        ns.argv.append(ns.work)
        return ns

    # paths inside the work directory
    def _path(self, name: str) -> str:
        return os.path.join(self.work, name)

    def start(self) -> Namespace:
        """Start the namespace (and, unless ``gated``, the target)."""
        sb = self.sandbox
        os.mkdir(self.tmpdir, 0o700)
        config = {
            "argv": self.argv, "shm_bytes": int(sb.shm_bytes), "tmp_bytes": int(sb.tmp_bytes),
            "hostname": sb.hostname, "timeout": float(sb.timeout), "settle": float(sb.settle),
            "env": {**os.environ, **sb.env, "TMPDIR": self.tmpdir},
            "cwd": sb.cwd or os.getcwd(), "hosts": dict(sb.hosts),
            "setup": [list(c) for c in sb.setup], "gated": self.gated, "tmpdir": self.tmpdir,
        }
        with open(self._path("config.json"), "w") as f:
            json.dump(config, f)
        ids_r, ids_w = os.pipe()
        held_r, held_w = os.pipe()
        try:
            with open(self._path("stdout"), "wb") as out, \
                    open(self._path("stderr"), "wb") as err:
                self._proc = subprocess.Popen(
                    [*UNSHARE, sys.executable, "-S", INIT_SCRIPT, "--init", self.work,
                     str(ids_w), str(held_r)],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                    pass_fds=(ids_w, held_r),
                )
        finally:
            os.close(ids_w)
            os.close(held_r)
        self._started = time.monotonic()
        self._hold(ids_r, held_w)
        return self

    def _hold(self, ids_r: int, held_w: int) -> None:
        """Open the run's namespaces before its init may go on, and keep them open until
        :meth:`_release`: the kernel hands a freed namespace's id to the next one
        created, so without this hold a namespace another test starts during this
        one's teardown could take its ids and have its processes counted as this
        run's. An init that never reports (it failed to start) leaves nothing held,
        and :meth:`finish` reports it."""
        try:
            ids = read_ns_ids(ids_r, time.monotonic() + HOLD_TIMEOUT)
            if ids is None or self._proc is None:
                return
            init = self._init_child(self._proc.pid, ids)
            if init is None:
                return
            self._ids = ids
            self._held = hold_namespaces(init, ids)
            if self._held:
                os.write(held_w, b"h")
        finally:
            os.close(ids_r)
            os.close(held_w)

    def _release(self) -> None:
        """Let the kernel free the namespaces' ids (see :meth:`_hold`)."""
        held, self._held = self._held, []
        for fd in held:
            os.close(fd)

    @property
    def init_pid(self) -> int | None:
        """Host pid of the namespace's init (pid 1 inside), once it runs."""
        if self._proc is None:
            return None
        return self._init_child(self._proc.pid, self._ids)

    @staticmethod
    def _init_child(unshare_pid: int, ids: Mapping[str, str]) -> int | None:
        for child in proc_children(unshare_pid):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{child}/ns/pid") == ids.get("pid_for_children"):
                    return child
        return None

    @property
    def netns_path(self) -> str | None:
        """``/proc/<pid>/ns/net`` of the namespace (for ``ip link set ... netns``)."""
        pid = self.init_pid
        return None if pid is None else f"/proc/{pid}/ns/net"

    def release(self) -> None:
        """A gated namespace: run the setup commands and the target now."""
        with open(self._path("go.tmp"), "w") as f:
            f.write("go")
        os.rename(self._path("go.tmp"), self._path("go"))

    def finish(self, timeout: float | None = None) -> NamespaceResult:
        """Wait for the run to end (at most ``timeout``, default the sandbox's bound plus
        a margin), tear everything down, and return what happened."""
        if self._result is not None:
            return self._result
        proc = self._proc
        if proc is None:
            raise RuntimeError("Namespace.finish() before start()")
        sb = self.sandbox
        if timeout is None:
            timeout = sb.timeout + sb.settle + 2 * TEARDOWN_TIMEOUT + 10.0
            if self.gated:
                timeout += sb.timeout
        backstop = False
        try:
            proc.wait(max(timeout - (time.monotonic() - self._started), 0.0))
        except subprocess.TimeoutExpired:
            backstop = True
        self._kill_all()
        lingering = await_teardown(self._ids, TEARDOWN_TIMEOUT)
        self._release()
        self._result = self._collect(backstop, lingering)
        self._remove_work()
        return self._result

    def kill(self) -> tuple[int, ...]:
        """End the run now (everything in it is killed), and clean up; the host pids
        of processes still in the namespace afterwards (should be empty)."""
        lingering: tuple[int, ...] = ()
        if self._proc is not None and self._result is None:
            self._kill_all()
            lingering = await_teardown(self._ids, TEARDOWN_TIMEOUT)
        self._release()
        self._remove_work()
        return lingering

    def _kill_all(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            # The namespace's init first: the kernel kills the rest of its PID namespace,
            # and unshare, its parent, reaps it and exits. Killed together, unshare could
            # go first and leave init a zombie for the host's pid 1, which may never reap.
            init = self._init_child(proc.pid, self._ids)
            if init is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(init, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(TEARDOWN_TIMEOUT)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(TEARDOWN_TIMEOUT)

    def _collect(self, backstop: bool, lingering: tuple[int, ...]) -> NamespaceResult:
        report: dict[str, Any] = {}
        text = read_text(self._path("report.json"))
        if text:
            report = json.loads(text)
        mounts = mounted_under(self.work)
        setup_error = report.get("setup_error")
        if not report:
            setup_error = setup_error or (
                "the namespace's init reported nothing" + (" (killed at the host's backstop)"
                                                           if backstop else "")
            )
        if mounts:
            setup_error = f"{setup_error or ''} mounts left on the host: {mounts}".strip()
        value, raised = None, None
        result_path = self._path("result.pkl")
        if os.path.exists(result_path):
            with open(result_path, "rb") as f:
                kind, payload = pickle.load(f)
            if kind == "ok":
                value = payload
            else:
                raised = payload
        return NamespaceResult(
            returncode=report.get("returncode"),
            stdout=read_text(self._path("stdout")),
            stderr=read_text(self._path("stderr")),
            timed_out=backstop or bool(report.get("timed_out")),
            elapsed=float(report.get("elapsed", time.monotonic() - self._started)),
            shm_left=tuple(report.get("shm_left", ())),
            tmp_left=tuple(report.get("tmp_left", ())),
            stragglers=tuple(report.get("stragglers", ())),
            lingering=lingering,
            setup_error=setup_error,
            value=value,
            raised=raised,
        )

    def _remove_work(self) -> None:
        if not mounted_under(self.work):  # never recurse into a mount (it would be the host's)
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Namespace:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._result is None:
            self.kill()


def run_command(argv: Sequence[str], sandbox: Sandbox | None = None) -> NamespaceResult:
    """Run ``argv`` in fresh namespaces (see :class:`Sandbox`), bounded; always cleans up."""
    ns = Namespace(argv, sandbox)
    try:
        ns.start()
        return ns.finish()
    finally:
        ns.kill()


def run_script(args: Sequence[str], sandbox: Sandbox | None = None) -> NamespaceResult:
    """``python ARGS`` (e.g. ``["-m", "pkg.driver", "case"]``) in fresh namespaces,
    with this process's ``sys.path`` on its PYTHONPATH."""
    return run_command([sys.executable, *args], _with_path(sandbox or Sandbox()))


def run_callable(
    fn: Callable[..., Any], *args: Any, sandbox: Sandbox | None = None, **kwargs: Any
) -> NamespaceResult:
    """``fn(*args, **kwargs)`` in a child process in fresh namespaces; ``fn`` must be
    importable by name (a module-level function) and its arguments and return value
    picklable. The result's ``value`` is what it returned, ``raised`` the traceback of
    what it raised (then the exit status is 1)."""
    ns = Namespace.calling(fn, *args, sandbox=sandbox, **kwargs)
    try:
        ns.start()
        return ns.finish()
    finally:
        ns.kill()


def _with_path(sandbox: Sandbox) -> Sandbox:
    from dataclasses import replace

    paths = [p for p in sys.path if p and os.path.isdir(p)]
    extra = sandbox.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    env = {**sandbox.env, "PYTHONPATH": os.pathsep.join([*paths, *([extra] if extra else [])])}
    return replace(sandbox, env=env)


_probe: list[str | None] = []


def unavailable_reason() -> str | None:
    """Why namespaces cannot be used here (``None``: they can). Probed once."""
    if not _probe:
        _probe.append(_probe_once())
    return _probe[0]


def namespaces_available() -> bool:
    """Whether :func:`run_command` and friends work here (root on Linux with unshare)."""
    return unavailable_reason() is None


def _probe_once() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"Linux namespaces need Linux, this is {sys.platform}"
    if os.geteuid() != 0:
        return "mounting a private /dev/shm in a fresh namespace needs root"
    if shutil.which("unshare") is None:
        return "util-linux unshare is not installed"
    code = (
        "import os,socket;s=os.statvfs('/dev/shm');"
        "assert s.f_blocks*s.f_frsize<=2*1024*1024, s;"
        "assert socket.gethostname()=='vr-probe';"
        "assert os.getpid()==2, os.getpid();"
        "socket.create_server(('127.0.0.1',0)).close()"
    )
    try:
        result = run_command(
            [sys.executable, "-c", code],
            Sandbox(shm_bytes=MIB, tmp_bytes=MIB, hostname="vr-probe", timeout=20, settle=1),
        )
    except OSError as exc:
        return f"cannot start unshare: {exc}"
    if result.returncode != 0 or result.setup_error or result.lingering:
        return f"a trial namespace failed: {result.describe()}"
    return None
