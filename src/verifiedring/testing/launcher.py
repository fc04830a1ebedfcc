"""One bounded multiprocess supervisor for tests, ``stress/`` and ``bench/``.

:class:`Supervisor` starts one ``spawn`` process per :class:`Task`, collects
what each returned (or the traceback of what it raised), and bounds the whole
run: once one process has failed, the others (likely blocked on the failed
one) get ``failure_grace`` seconds, then are killed; at the deadline every
process still running is killed. Each ends with one :class:`Outcome`. Only the
processes a supervisor started are ever killed, and leaving its ``with`` block
kills and reaps any still running, whatever happened in the parent meanwhile.
While they run, :meth:`Supervisor.pid` and :meth:`Supervisor.signal` reach one task
by name, and each task has a :class:`Channel` of its own to the parent
(:meth:`Supervisor.channel` there, :func:`channel` inside the task).

:func:`run_tasks` is the one-call form that raises on any failure, and
:func:`run_group` builds a torch.distributed world on it: a FileStore
rendezvous in a fresh temporary directory (no port races), every collective
bounded by ``collective_timeout``. torch is imported only inside the spawned
ranks of :func:`run_group`.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
import queue as queue_mod
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import TracebackType
from typing import Any

from ..errors import BrokenPeerError, MisuseError, RingTimeoutError

FAILURE_GRACE = 5.0  # seconds the others may run on after one process failed
JOIN_TIMEOUT = 5.0  # seconds to reap a process after it ended or was killed
POLL = 0.2  # seconds between checks for processes that died without reporting

OK = "ok"  # returned a value
RAISED = "raised"  # the task raised; ``error`` is its traceback
DIED = "died"  # the process ended without reporting (a crash, os._exit, a signal)
TIMED_OUT = "timed out"  # still running at the deadline; killed
STOPPED = "stopped"  # still running ``failure_grace`` after another one failed; killed


@dataclass(frozen=True)
class Task:
    """``target(*args)`` in its own process, with ``env`` added to its environment.

    ``target`` must be importable by name (a module-level function) and its
    arguments and return value picklable, as the process is spawned.
    """

    target: Callable[..., Any]
    args: tuple[Any, ...] = ()
    name: str = ""
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """How one task ended: ``status`` is one of OK, RAISED, DIED, TIMED_OUT, STOPPED;
    ``exitcode`` its process's (negative: the signal that ended it)."""

    name: str
    status: str
    value: Any = None
    error: str = ""
    exitcode: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def failed(self) -> bool:
        """It raised or died (rather than being stopped by the supervisor)."""
        return self.status in (RAISED, DIED)

    def describe(self) -> str:
        return f"{self.name} {self.status}" + (f": {self.error}" if self.error else "")


class Channel:
    """A task's two-way line to its supervisor: two queues of its own, so a task killed
    or stopped mid-message blocks no other task's line, and a send never waits for the
    other end to read. Messages must be picklable. On the supervisor's side, ``alive``
    tells whether the task still runs: once it has ended, :meth:`recv` says so."""

    def __init__(
        self, inbox: Any, outbox: Any, peer: str, alive: Callable[[], bool] | None = None
    ) -> None:
        self._inbox = inbox
        self._outbox = outbox
        self.peer = peer  # who is at the other end, for errors
        self._alive = alive
        self._ahead: list[Any] = []  # a message poll() took out early

    def send(self, obj: Any) -> None:
        self._outbox.put(obj)

    def flush(self) -> None:
        """Return once everything sent is on its way (a task about to end abruptly
        calls it, so nothing it sent is lost); nothing more can be sent."""
        self._outbox.close()
        self._outbox.join_thread()

    def poll(self, timeout: float = 0.0) -> bool:
        """Whether a message is there (waiting at most ``timeout`` seconds)."""
        if not self._ahead:
            with contextlib.suppress(queue_mod.Empty):
                self._ahead.append(self._inbox.get(timeout=timeout) if timeout else
                                   self._inbox.get_nowait())
        return bool(self._ahead)

    def recv(self, timeout: float) -> Any:
        """The next message; :class:`TimeoutError` if none comes within ``timeout``
        seconds, :class:`BrokenPeerError` once the task has ended and sent nothing more."""
        deadline = time.monotonic() + timeout
        while not self.poll(max(min(POLL, deadline - time.monotonic()), 0.0)):
            if self._alive is not None and not self._alive() and not self.poll():
                raise BrokenPeerError(f"{self.peer} has gone (it ended, nothing more came)")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no message from {self.peer} within {timeout:g} s")
        return self._ahead.pop()


def _running(proc: Any) -> bool:
    return proc.exitcode is None


_own: list[Channel] = []  # inside a task: its channel to the supervisor


def channel() -> Channel:
    """Inside a task a :class:`Supervisor` started: the task's channel to the parent."""
    if not _own:
        raise MisuseError("channel(): not inside a task started by a Supervisor")
    return _own[0]


def _child(index: int, task: Task, results: Any, inbox: Any, outbox: Any) -> None:
    os.environ.update(task.env)
    _own.append(Channel(inbox, outbox, "the supervisor"))
    try:
        value = task.target(*task.args)
    except BaseException as e:
        results.put((index, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    else:
        results.put((index, True, value))


class Supervisor:
    """Runs ``tasks``, one spawned process each; use as a context manager.

    ``with Supervisor(tasks) as run: ...; outcomes = run.wait(timeout)``: the
    parent may do its own part of the work between starting and waiting.
    """

    def __init__(self, tasks: Sequence[Task]) -> None:
        if not tasks:
            raise MisuseError("Supervisor: no tasks to run")
        ctx = mp.get_context("spawn")
        self._results: Any = ctx.Queue()
        self.names = [t.name or f"task{i}" for i, t in enumerate(tasks)]
        if len(set(self.names)) != len(self.names):
            raise MisuseError(f"Supervisor: task names must differ, got {self.names}")
        to_task, from_task = [ctx.Queue() for _ in tasks], [ctx.Queue() for _ in tasks]
        self._procs = [
            ctx.Process(
                target=_child, args=(i, t, self._results, to_task[i], from_task[i]),
                name=self.names[i],
            )
            for i, t in enumerate(tasks)
        ]
        self._channels = [
            Channel(from_task[i], to_task[i], name, functools.partial(_running, p))
            for i, (name, p) in enumerate(zip(self.names, self._procs, strict=True))
        ]
        self._started = False

    def __enter__(self) -> Supervisor:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self._started:
            raise MisuseError("Supervisor.start: already started")
        self._started = True
        for p in self._procs:
            p.start()

    def _index(self, name: str) -> int:
        if name not in self.names:
            raise MisuseError(f"Supervisor: no task named {name!r} (tasks: {self.names})")
        return self.names.index(name)

    def pid(self, name: str) -> int:
        """The process id of task ``name`` (started)."""
        pid = self._procs[self._index(name)].pid
        if pid is None:
            raise MisuseError(f"Supervisor.pid: {name!r} is not started")
        return pid

    def signal(self, name: str, sig: int, *, group: bool = False) -> None:
        """Send ``sig`` to task ``name`` (to its process group, if ``group``: the task
        made one of its own), if it still runs; never to a process it did not start."""
        proc = self._procs[self._index(name)]
        pid = self.pid(name)
        if proc.exitcode is None:
            (os.killpg if group else os.kill)(pid, sig)

    def channel(self, name: str) -> Channel:
        """The parent's end of task ``name``'s :class:`Channel`."""
        return self._channels[self._index(name)]

    def wait(self, timeout: float, *, failure_grace: float = FAILURE_GRACE) -> list[Outcome]:
        """Each task's outcome, in task order, within ``timeout`` seconds from now."""
        if not self._started:
            raise MisuseError("Supervisor.wait: not started")
        n = len(self._procs)
        done: dict[int, Outcome] = {}
        exited: set[int] = set()  # seen ended at an earlier poll, not yet reported
        deadline = time.monotonic() + timeout
        while len(done) < n and (now := time.monotonic()) < deadline:
            try:
                i, ok, value = self._results.get(timeout=min(POLL, deadline - now))
            except queue_mod.Empty:
                for i in exited - done.keys():  # a report would have arrived by now
                    code = self._procs[i].exitcode
                    done[i] = Outcome(self.names[i], DIED, error=f"exit code {code}, no report")
                exited = {i for i, p in enumerate(self._procs) if p.exitcode is not None}
            else:
                status, error = (OK, "") if ok else (RAISED, value)
                done[i] = Outcome(self.names[i], status, value if ok else None, error)
            if any(o.failed for o in done.values()):
                deadline = min(deadline, time.monotonic() + failure_grace)
        if any(o.failed for o in done.values()):
            late = Outcome("", STOPPED, error=f"killed {failure_grace:g} s after a failure")
        else:
            late = Outcome("", TIMED_OUT, error=f"killed at the {timeout:g} s deadline")
        exits_by = time.monotonic() + JOIN_TIMEOUT
        for i in done:  # a task that reported exits by itself (its exit code counts)
            self._procs[i].join(max(exits_by - time.monotonic(), 0.0))
        self.stop()
        return [
            replace(done.get(i) or late, name=self.names[i], exitcode=p.exitcode)
            for i, p in enumerate(self._procs)
        ]

    def stop(self) -> None:
        """Kill the processes still running and reap them all."""
        for p in self._procs:
            if p.pid is None:
                continue
            if p.is_alive():
                p.kill()
            p.join(JOIN_TIMEOUT)


def problems(outcomes: Sequence[Outcome]) -> list[str]:
    """What went wrong, causes first: each task that raised or died, then those killed."""
    bad = sorted((o for o in outcomes if not o.ok), key=lambda o: not o.failed)
    return [o.describe() for o in bad]


def raise_for(outcomes: Sequence[Outcome], what: str = "processes") -> list[Any]:
    """The values, if every task returned; else BrokenPeerError if one raised or
    died, RingTimeoutError if some were killed at the deadline, naming each."""
    text = "\n".join(problems(outcomes))
    failed = sum(o.failed for o in outcomes)
    if failed:
        raise BrokenPeerError(f"{failed} of {len(outcomes)} {what} failed:\n{text}")
    if text:
        raise RingTimeoutError(f"{what} did not finish:\n{text}")
    return [o.value for o in outcomes]


def run_tasks(
    tasks: Sequence[Task], *, timeout: float, failure_grace: float = FAILURE_GRACE
) -> list[Any]:
    """Run ``tasks`` to the end; their return values in task order (see :func:`raise_for`)."""
    with Supervisor(tasks) as run:
        return raise_for(run.wait(timeout, failure_grace=failure_grace))


def _rank_entry(
    rank: int,
    world_size: int,
    init_file: str,
    backend: str,
    collective_timeout: float,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> Any:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if "nccl" in backend and torch.cuda.is_available():
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(
        backend,
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=collective_timeout),
    )
    try:
        return fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def run_group(
    fn: Callable[..., Any],
    world_size: int,
    *,
    args: tuple[Any, ...] = (),
    backend: str = "gloo",
    timeout: float = 120.0,
    collective_timeout: float = 60.0,
    rank_env: Mapping[int, Mapping[str, str]] | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` spawned ranks of one
    torch.distributed world; the ranks' return values in rank order.

    ``fn`` must be importable by name. Raises BrokenPeerError naming every rank
    that raised or died, RingTimeoutError naming the ranks still running at
    ``timeout``. ``rank_env`` adds environment variables per rank.
    """
    env = rank_env or {}
    with tempfile.TemporaryDirectory(prefix="verifiedring-pg-") as tmp:
        init_file = os.path.join(tmp, "store")
        tasks = [
            Task(
                _rank_entry,
                (r, world_size, init_file, backend, collective_timeout, fn, args),
                name=f"rank {r}",
                env=dict(env.get(r, {})),
            )
            for r in range(world_size)
        ]
        with Supervisor(tasks) as run:
            return raise_for(run.wait(timeout), what="ranks")
