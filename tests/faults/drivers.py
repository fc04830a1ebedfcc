"""What runs inside each namespace: one driver function per case, and its processes.

A driver runs as the target of :func:`verifiedring.testing.namespaces.run_callable`
(so inside the namespace: private /dev/shm and TMPDIR, only loopback, host name
:data:`HOST`), starts the case's other processes (``spawn``, or ``subprocess``
where a real process exit is the point), injects the fault, and returns a dict
of what it observed -- error types, messages, measured times -- for the test to
assert. Every wait here is bounded.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import logging
import math
import os
import pickle
import queue
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from verifiedring import BrokenPeerError, MessageQueue, MisuseError, RingTimeoutError
from verifiedring.queue import LocalReader, QueueWriter
from verifiedring.queue.handle import Handle
from verifiedring.testing import wait_blocked
from verifiedring.testing.faults import writer_ring
from verifiedring.testing.launcher import Channel, Supervisor, Task, channel

HOST = "vr-fault"
LOOPBACK = "127.0.0.1"
T = 20.0  # the bound of any single wait that should succeed
BOUND = 10.0  # the bound of a wait that must end with an error
SHM_DIR = "/dev/shm"
SMALL = 64 * 1024  # max_chunk_bytes of most cases: their rings fit a small /dev/shm

Obs = dict[str, Any]


# --- small tools -------------------------------------------------------------------


def listing() -> list[str]:
    """This namespace's /dev/shm and TMPDIR, as ``shm:<name>`` / ``tmp:<name>``."""
    out = [f"shm:{n}" for n in sorted(os.listdir(SHM_DIR))]
    out += [f"tmp:{n}" for n in sorted(os.listdir(tempfile.gettempdir()))]
    return out


def others() -> list[int]:
    """Processes of this PID namespace other than init (1), this one and its children."""
    me = os.getpid()
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    return [p for p in pids if p not in (1, me) and _ppid(p) != me]


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def wait_alone(bound: float = 10.0) -> float:
    """Wait until no process but init, this one and its children runs (e.g. a dead
    writer's resource tracker finishing); the seconds it took."""
    t0 = time.monotonic()
    while others() and time.monotonic() - t0 < bound:
        time.sleep(0.02)
    return time.monotonic() - t0


def outcome(
    call: Callable[[], Any],
    bound: float = BOUND,
    started: Callable[[threading.Thread], None] | None = None,
) -> Obs:
    """Run ``call`` in a thread for at most ``bound`` s: what it raised or returned, when.
    ``started`` is given that thread once it runs (e.g. to wait until it blocks)."""
    box: list[Any] = []
    t0 = time.monotonic()

    def run() -> None:
        try:
            box.append(("ok", call()))
        except BaseException as exc:  # handed to the test
            box.append(("raised", exc))
        box.append(time.monotonic())

    th = threading.Thread(target=run, daemon=True)
    th.start()
    if started is not None:
        started(th)
    th.join(bound)
    if not box:
        return {"error": None, "hung": True, "seconds": bound, "message": "", "value": None}
    kind, what = box[0]
    seconds = box[1] - t0
    if kind == "ok":
        return {"error": None, "hung": False, "seconds": seconds, "message": "", "value": what}
    return {
        "error": type(what).__name__, "hung": False, "seconds": seconds, "message": str(what),
        "value": None, "kinds": kinds(what),
    }


def error_of(call: Callable[[], Any]) -> Obs:
    """What ``call`` raised at once (type name and message); error None if nothing."""
    try:
        call()
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(exc), "kinds": kinds(exc)}
    return {"error": None, "message": "", "kinds": []}


def kinds(exc: BaseException) -> list[str]:
    """The names of the classes ``exc`` is an instance of (a subclass still counts)."""
    return [c.__name__ for c in type(exc).__mro__]


def pair(n_reader: int = 1, n_local: int = 1, **kw: Any) -> tuple[MessageQueue, MessageQueue]:
    """A writer and its one reader in this process, handshaken."""
    w = MessageQueue(n_reader, n_local, **kw)
    r = MessageQueue.create_from_handle(w.export_handle(), 0 if n_local else 1)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    return w, r


def round_trip(w: MessageQueue, readers: list[MessageQueue], obj: Any) -> bool:
    w.enqueue(obj, timeout=T)
    return all(r.dequeue(T) == obj for r in readers)


class Logs(logging.Handler):
    """The verifiedring logger's records while it is installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @contextlib.contextmanager
    def installed(self) -> Iterator[Logs]:
        log = logging.getLogger("verifiedring")
        log.addHandler(self)
        old = log.level
        log.setLevel(logging.DEBUG)
        try:
            yield self
        finally:
            log.removeHandler(self)
            log.setLevel(old)


# --- processes of the cases ----------------------------------------------------


def reader_proc(handle: Handle, rank: int) -> None:
    """A reader (a Supervisor task): attach ``rank``, then report on its channel every
    message (rank, "got", value) until told "stop" or an error other than a timeout
    ends it: then (rank, "error", type, message)."""
    line = channel()
    with MessageQueue.create_from_handle(handle, rank) as r:
        r.wait_until_ready(T)
        line.send((rank, "ready", os.getpid()))
        while not line.poll():
            try:
                line.send((rank, "got", r.dequeue(0.2)))
            except RingTimeoutError:
                continue
            except Exception as exc:
                line.send((rank, "error", type(exc).__name__, str(exc)))
                return


def readers(handle: Handle, ranks: list[int], names: list[str] | None = None) -> Supervisor:
    """Spawned :func:`reader_proc` tasks, one per rank, named ``rank <r>`` (or ``names``)."""
    names = names or [f"rank {r}" for r in ranks]
    return Supervisor([Task(reader_proc, (handle, r), name=n) for r, n in zip(ranks, names,
                                                                             strict=True)])


def stop_readers(run: Supervisor) -> None:
    """Tell every reader to stop (each still running closes its queue end), then reap."""
    for name in run.names:
        with contextlib.suppress(OSError):
            run.channel(name).send("stop")
    run.wait(T)


#: The heartbeat timeout of the queues whose writer a test stops: a stopped process is
#: a dead host to its peers, named once this much silence has passed.
STOPPED_PEER_HEARTBEAT = 1.0


def writer_proc(n_reader: int, n_local: int, group: bool, overflow_death: bool) -> None:
    """A writer (a Supervisor task): handshake, send "first", wait for "go" on its channel;
    then (overflow_death) send a large object and die right after publishing its overflow
    marker, else say "parked" and wait to be killed."""
    ch = channel()
    if group:
        os.setpgid(0, 0)  # before the resource tracker starts: it joins this group
    kw: dict[str, Any] = {"max_chunk_bytes": 1024, "max_chunks": 2}
    if n_local < n_reader:
        kw["connect_ip"] = LOOPBACK
        kw["heartbeat_timeout"] = STOPPED_PEER_HEARTBEAT  # a stopped writer's bound
    with MessageQueue(n_reader, n_local, **kw) as w:
        if overflow_death:
            from verifiedring.testing.faults import before_local_frame

            def die() -> None:
                ch.send("marker published")  # the marker is in the ring: no frame follows
                ch.flush()
                os.kill(os.getpid(), signal.SIGKILL)

            before_local_frame(w, die)
        ch.send(w.export_handle())
        w.wait_until_ready(T)
        w.enqueue("first", timeout=T)
        if ch.recv(T) != "go":
            raise AssertionError("the writer's driver did not say go")
        if overflow_death:
            w.enqueue(b"x" * 10_000, timeout=T)  # too large for a chunk: marker, then frame
        ch.send("parked")
        time.sleep(T)  # killed here


def _writer(local: bool, group: bool = False, overflow_death: bool = False) -> Supervisor:
    """The spawned writer of one local (or remote) reader, as a Supervisor task "writer"."""
    return Supervisor([Task(writer_proc, (1, 1 if local else 0, group, overflow_death),
                            name="writer")])


def collect(
    lines: Channel | list[Channel], want: Callable[[list[tuple[Any, ...]]], bool], bound: float = T
) -> list[tuple[Any, ...]]:
    """Reports from ``lines`` (task channels) until ``want(reports)`` or ``bound`` seconds.
    Each task has a line of its own, so one killed or stopped blocks no other's reports."""
    open_lines = list(lines) if isinstance(lines, list) else [lines]
    got: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + bound
    while open_lines and not want(got) and time.monotonic() < deadline:
        for line in list(open_lines):
            try:
                got.append(line.recv(0.1 / len(open_lines)))
            except TimeoutError:
                continue
            except BrokenPeerError:  # that task has gone: nothing more from it
                open_lines.remove(line)
    return got


def received(reports: list[tuple[Any, ...]], rank: int) -> list[Any]:
    return [r[2] for r in reports if r[0] == rank and r[1] == "got"]


# --- dead and stopped readers ----------------------------------------------------


def reader_killed(channel: str) -> Obs:
    """Two readers; SIGKILL rank 1; the writer, filling with timeout=None, is told."""
    local = channel == "local"
    w = MessageQueue(
        2, 2 if local else 0, [0, 1] if local else [], connect_ip=LOOPBACK, max_chunks=2,
        max_chunk_bytes=SMALL, remote_window=4,
    )
    run = readers(w.export_handle(), [0, 1])
    run.start()
    lines = [run.channel(n) for n in run.names]
    obs: Obs = {"pids": [run.pid(n) for n in run.names]}
    try:
        w.wait_until_ready(T)
        w.enqueue("one", timeout=T)
        collect(lines, lambda g: len([x for x in g if x[1] == "got"]) == 2)
        sent = ["one"]
        run.signal("rank 1", signal.SIGKILL)
        t_kill = time.monotonic()

        def fill() -> None:
            while True:  # the ring (2 chunks) or the window (4) fills, then it waits
                w.enqueue(f"more {len(sent)}", timeout=None)
                sent.append(f"more {len(sent)}")

        obs["fill"] = outcome(fill)
        obs["detect_seconds"] = time.monotonic() - t_kill
        obs["after"] = error_of(lambda: w.enqueue("after", timeout=0))
        reports = collect(lines[0], lambda g: len(received(g, 0)) >= len(sent) - 1, bound=5.0)
        obs["rank0_got"] = ["one", *received(reports, 0)]
        obs["sent"] = sent
        obs["rank0_errors"] = [r for r in reports if r[0] == 0 and r[1] == "error"]
    finally:
        stop_readers(run)
        w.close()
    return obs


def reader_stopped() -> Obs:
    """Local ranks 0, 1 and remote rank 2; SIGSTOP rank 1: the writer's timeouts and
    stall log name rank 1, ranks 0 and 2 get every message; after SIGCONT all is well."""
    w = MessageQueue(
        3, 2, [0, 1], connect_ip=LOOPBACK, max_chunks=4, max_chunk_bytes=SMALL, remote_window=64
    )
    run = readers(w.export_handle(), [0, 1, 2])
    run.start()
    outs = [run.channel(n) for n in run.names]
    obs: Obs = {"pids": [run.pid(n) for n in run.names]}
    sent: list[Any] = []
    try:
        w.wait_until_ready(T)
        for i in range(2):
            w.enqueue(i, timeout=T)
            sent.append(i)
        reports = collect(outs, lambda g: all(len(received(g, r)) == 2 for r in (0, 1, 2)))
        run.signal("rank 1", signal.SIGSTOP)
        errors = []
        for i in range(2, 12):
            try:
                w.enqueue(i, timeout=0.5)
                sent.append(i)
            except RingTimeoutError as exc:
                errors.append(str(exc))
                break
        obs["timeout_message"] = errors[0] if errors else None
        obs["sent_while_stopped"] = len(sent) - 2
        w.log_interval = 0.2
        with Logs().installed() as logs:
            obs["stalled"] = error_of(lambda: w.enqueue("stalled", timeout=1.0))
        obs["stall_log"] = logs.lines
        reports += collect(
            outs, lambda g: all(len(received(reports + g, r)) == len(sent) for r in (0, 2))
        )
        obs["others_got"] = {r: received(reports, r) for r in (0, 2)}
        obs["others_errors"] = [r for r in reports if r[1] == "error"]
        obs["sent"] = list(sent)
        run.signal("rank 1", signal.SIGCONT)
        w.enqueue("after", timeout=T)
        sent.append("after")
        more = collect(outs, lambda g: all(len(received(reports + g, r)) == len(sent)
                                          for r in (0, 1, 2)))
        reports += more
        obs["all_got"] = {r: received(reports, r) for r in (0, 1, 2)}
        obs["all_sent"] = sent
    finally:
        run.signal("rank 1", signal.SIGCONT)  # a stopped reader cannot stop
        stop_readers(run)
        w.close()
    return obs


# --- dead writers --------------------------------------------------------------------


def writer_killed(channel: str, group: bool) -> Obs:
    """This process is reader 0 of a spawned writer; SIGKILL the writer (or its whole
    process group): dequeue(timeout=None) raises BrokenPeerError naming it."""
    local = channel == "local"
    obs: Obs = {}
    with _writer(local, group) as run:
        line, pid = run.channel("writer"), run.pid("writer")
        obs["writer_pid"] = pid
        with MessageQueue.create_from_handle(line.recv(T), 0 if local else 1) as r:
            r.wait_until_ready(T)
            obs["first"] = r.dequeue(T)
            line.send("go")
            if line.recv(T) != "parked":  # done with the queue: now it waits to be killed
                raise AssertionError("the writer did not park")
            obs["group_members"] = sorted(
                p for p in (int(x) for x in os.listdir("/proc") if x.isdigit())
                if p not in (1, os.getpid()) and _pgid(p) == pid
            )
            run.signal("writer", signal.SIGKILL, group=group)
            obs["dequeue"] = outcome(lambda: r.dequeue(None))
            obs["again"] = error_of(lambda: r.dequeue(0))
        (ended,) = run.wait(T)
        obs["exitcode"] = ended.exitcode
        obs["settle_seconds"] = wait_alone()
    return obs


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


def overflow_death() -> Obs:
    """The writer dies right after publishing an overflow marker, before its frame: the
    local reader, waiting with timeout=None, raises BrokenPeerError naming it."""
    obs: Obs = {}
    with _writer(local=True, overflow_death=True) as run:
        line = run.channel("writer")
        obs["writer_pid"] = run.pid("writer")
        with LocalReader.create_from_handle(line.recv(T), 0) as r:
            r.wait_until_ready(T)
            obs["first"] = r.dequeue(T)
            result: list[Obs] = []
            dequeuing: queue.Queue[threading.Thread] = queue.Queue()
            th = threading.Thread(target=lambda: result.append(
                outcome(lambda: r.dequeue(None), started=dequeuing.put)))
            th.start()
            wait_blocked(dequeuing.get(timeout=T), T)  # the reader waits on the ring first
            line.send("go")
            try:
                obs["marker_published"] = line.recv(T) == "marker published"
            except (TimeoutError, BrokenPeerError):
                obs["marker_published"] = False
            th.join(BOUND + 1)
            obs["dequeue"] = result[0] if result else {"hung": True}
            obs["pending"] = r._path._frames.pending
            obs["again"] = error_of(lambda: r.dequeue(0))
        (ended,) = run.wait(T)
        obs["exitcode"] = ended.exitcode
        wait_alone()
    return obs


def writer_stopped_remote() -> Obs:
    """SIGSTOP the writer of a remote reader: its heartbeats stop, so the reader waiting
    with timeout=None is told within about the heartbeat timeout."""
    obs: Obs = {}
    with _reader_of_a_spawned_writer(obs) as (run, r):
        run.signal("writer", signal.SIGSTOP)
        obs["dequeue"] = outcome(lambda: r.dequeue(None))
    return obs


@contextlib.contextmanager
def _reader_of_a_spawned_writer(obs: Obs) -> Iterator[tuple[Supervisor, MessageQueue]]:
    """A spawned writer (task "writer") and its remote reader rank 1 here, handshaken,
    its first message taken (in ``obs["first"]``; the writer's pid in ``obs``)."""
    with _writer(local=False) as run:
        line = run.channel("writer")
        obs["writer_pid"] = run.pid("writer")
        with MessageQueue.create_from_handle(line.recv(T), 1) as r:
            r.wait_until_ready(T)
            obs["first"] = r.dequeue(T)
            yield run, r


def _half_handshaken_writer_proc() -> None:
    """A writer of two remote readers (a Supervisor task): publish the handle, then wait
    for the handshake, reporting "seen" once rank 1 has subscribed; rank 2 never comes."""
    line = channel()
    w = MessageQueue(2, 0, connect_ip=LOOPBACK, max_chunk_bytes=1024)
    line.send(w.export_handle())
    said = False
    while True:
        try:
            w.wait_until_ready(0.05)
        except RingTimeoutError as exc:
            if not said and "seen [1]" in str(exc):
                line.send("seen")
                said = True


def writer_killed_before_the_handshake() -> Obs:
    """The writer dies after a remote reader subscribed and before READY: that reader's
    wait_until_ready(None) is told, not left waiting."""
    obs: Obs = {}
    with Supervisor([Task(_half_handshaken_writer_proc, (), name="writer")]) as run:
        line = run.channel("writer")
        obs["writer_pid"] = run.pid("writer")
        with MessageQueue.create_from_handle(line.recv(T), 1) as r:
            assert line.recv(T) == "seen"
            run.signal("writer", signal.SIGKILL)
            obs["ready"] = outcome(lambda: r.wait_until_ready(None))
    return obs


def writer_killed_under_polls() -> Obs:
    """A remote reader polling with dequeue(timeout=0) after its writer was killed is
    told within the dead-peer bound, as one waiting with a timeout is."""
    obs: Obs = {}
    with _reader_of_a_spawned_writer(obs) as (run, r):
        run.signal("writer", signal.SIGKILL)
        killed = time.monotonic()
        polls: list[str] = []
        while time.monotonic() - killed < BOUND:
            e = error_of(lambda: r.dequeue(0))
            polls.append(e["error"] or "message")
            if e["error"] not in ("RingTimeoutError", None):
                obs["error"] = e
                break
            time.sleep(0.05)  # a poller's own pace between polls
        obs["seconds"] = time.monotonic() - killed
        obs["polls"] = polls
    return obs


#: The writer in a PID namespace of its own (pid 1 there forks it as pid 99999, which
#: this namespace does not have): a container sharing /dev/shm (--ipc=host).
_OTHER_PID_NAMESPACE_WRITER = r"""
import base64, os, pickle, sys
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write("99998")
pid = os.fork()
if pid:
    sys.exit(os.waitpid(pid, 0)[1] >> 8)
from verifiedring import MessageQueue
w = MessageQueue(1, 1, max_chunk_bytes=1024)
print(base64.b64encode(pickle.dumps(w.export_handle())).decode(), os.getpid(), flush=True)
assert sys.stdin.readline() == "go\n"
w.wait_until_ready(20)
print("ready", flush=True)
assert sys.stdin.readline() == "send\n"
w.enqueue("from another pid namespace", timeout=20)
assert sys.stdin.readline() == "close\n"
w.close()
"""


def writer_in_another_pid_namespace() -> Obs:
    """A writer in another PID namespace on this /dev/shm, before its handshake: a
    create here (which reaps) and ``cleanup`` leave its names alone, and a local reader
    here, waiting longer than the dead-writer grace, does not take it for dead."""
    obs: Obs = {}
    child = subprocess.Popen(
        ["unshare", "--pid", "--fork", sys.executable, "-c", _OTHER_PID_NAMESPACE_WRITER],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        encoded, pid = child.stdout.readline().split()
        handle = pickle.loads(base64.b64decode(encoded))
        obs["writer_pid_there"] = int(pid)
        obs["seen_here"] = os.path.exists(f"/proc/{pid}")
        obs["names"] = listing()
        with MessageQueue(1, 1, max_chunk_bytes=1024):  # a create here reaps what is stale
            pass
        obs["after_create"] = listing()
        cleanup = subprocess.run([sys.executable, "-m", "verifiedring", "cleanup"],
                                 capture_output=True, text=True, timeout=60)
        obs["cleanup"] = cleanup.stdout
        obs["after_cleanup"] = listing()
        with MessageQueue.create_from_handle(handle, 0) as r:
            child.stdin.write("go\n")
            child.stdin.flush()
            r.wait_until_ready(T)
            obs["ready"] = child.stdout.readline().strip()

            def then_send(th: threading.Thread) -> None:
                wait_blocked(th, T)
                time.sleep(1.0)  # twice the dead-writer grace: a writer taken for dead is told
                assert child.stdin is not None
                child.stdin.write("send\n")
                child.stdin.flush()

            obs["dequeue"] = outcome(lambda: r.dequeue(T), started=then_send)
        child.stdin.write("close\n")
        child.stdin.flush()
        obs["returncode"] = child.wait(T)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return obs


def _idle_connector(address: str, n: int) -> None:
    """An outsider (a Supervisor task): ``n`` TCP connections to ``address`` that never
    speak, held until told "stop"; reports how many connected."""
    line = channel()
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    held = []
    for _ in range(n):
        s = socket.socket()
        s.connect((host, int(port)))
        held.append(s)
    line.send(len(held))
    line.recv(BOUND * 3)
    for s in held:
        s.close()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def idle_connects() -> Obs:
    """An outsider opens 300 TCP connections to the writer's port and never speaks: the
    writer's process gets its descriptors back within its handshake interval (libzmq
    held each for its 30 s default before), and the queue goes on working."""
    obs: Obs = {}
    with MessageQueue(1, 0, connect_ip=LOOPBACK, max_chunk_bytes=1024) as w:
        h = w.export_handle()
        assert h.remote_subscribe_addr is not None
        r = MessageQueue.create_from_handle(h, 1)
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        baseline = _open_fds()
        with Supervisor([Task(_idle_connector, (h.remote_subscribe_addr, 300),
                              name="outsider")]) as run:
            line = run.channel("outsider")
            obs["connected"] = line.recv(T)
            t0 = time.monotonic()
            while _open_fds() < baseline + 100 and time.monotonic() - t0 < BOUND:
                time.sleep(0.01)  # polling: libzmq accepts them in its own thread
            peak, accepted = _open_fds(), time.monotonic()
            while _open_fds() > baseline + 10 and time.monotonic() - accepted < BOUND:
                time.sleep(0.05)  # polling this process's descriptor count
            obs["released_after"] = time.monotonic() - accepted
            obs["fds"] = {"baseline": baseline, "peak": peak, "after": _open_fds()}
            w.enqueue("still working", timeout=T)
            obs["got"] = r.dequeue(T)
            line.send("stop")
        r.close()
    return obs


#: How long a remote reader is paused: three times the old (1 s) heartbeat bound.
READER_PAUSE = 3.0


def remote_reader_paused() -> Obs:
    """SIGSTOP a remote reader for READER_PAUSE seconds (a GC pause, swapping, a loaded
    host) while the writer goes on sending, then SIGCONT: with the default heartbeat
    timeout the reader still gets every message in order and the writer is not broken."""
    obs: Obs = {"writer_errors": []}
    with MessageQueue(1, 0, connect_ip=LOOPBACK, max_chunk_bytes=1024) as w:
        run = readers(w.export_handle(), [1])
        run.start()
        line = run.channel("rank 1")
        w.wait_until_ready(T)
        collect(line, lambda reps: any(r[1] == "ready" for r in reps))

        def send(values: range) -> None:
            for i in values:
                e = error_of(functools.partial(w.enqueue, i, timeout=T))
                if e["error"] is not None:
                    obs["writer_errors"].append(e)

        send(range(10))
        run.signal("rank 1", signal.SIGSTOP)
        stopped = time.monotonic()
        send(range(10, 20))
        time.sleep(max(READER_PAUSE - (time.monotonic() - stopped), 0.0))  # the pause itself
        send(range(20, 30))
        run.signal("rank 1", signal.SIGCONT)
        obs["paused"] = time.monotonic() - stopped
        reports = collect(line, lambda reps: len(received(reps, 1)) >= 30 or any(
            r[1] == "error" for r in reps))
        send(range(30, 31))  # the writer is still whole after the pause
        reports += collect(line, lambda reps: len(received(reps, 1)) >= 1 or any(
            r[1] == "error" for r in reps))
        obs["got"] = received(reports, 1)
        obs["reader_errors"] = [r for r in reports if r[1] == "error"]
        stop_readers(run)
    return obs


# --- a full /dev/shm ---------------------------------------------------------------


def shm_free() -> int:
    st = os.statvfs(SHM_DIR)
    return st.f_bavail * st.f_frsize


def shm_full_at_create(policy: str) -> Obs:
    """/dev/shm is smaller than what the ring's room check asks for under ``policy``
    (a chunk larger than it): MisuseError naming both sizes, nothing left, and a
    queue that fits works afterwards."""
    from verifiedring import RingLayout, ShmRingBuffer
    from verifiedring.reservation import RESERVE_ENV, room_at_create

    os.environ[RESERVE_ENV] = policy
    mcb, chunks = 2 * 1024 * 1024, 4
    obs: Obs = {"free": shm_free(), "needs": room_at_create(RingLayout(1, mcb, chunks), policy)}
    obs["queue"] = error_of(lambda: MessageQueue(1, 1, max_chunk_bytes=mcb, max_chunks=chunks))
    obs["ring"] = error_of(lambda: ShmRingBuffer(1, mcb, chunks))
    obs["left_after"] = listing()
    w, r = pair(max_chunk_bytes=4096, max_chunks=4)
    obs["round_trip"] = round_trip(w, [r], {"after": list(range(100))})
    r.close()
    w.close()
    return obs


def shm_full_between_rings(bypass_check: bool) -> Obs:
    """Two rings that each fit but together do not. The first is filled to its end
    (every page reserved, written and read back). Then the second: with the
    free-space check, refused at create, a MisuseError naming the sizes; with the
    check patched out (``bypass_check``), made sparse, so its first write that needs
    more pages than are free is a SharedMemoryFullError before any store (the page
    reservation alone catches it), and it still carries a small message after.
    Either way this process exits normally -- no SIGBUS."""
    from verifiedring import RingLayout
    from verifiedring.engine import EnginePolicy, set_engine_policy
    from verifiedring.reservation import room_at_create

    if bypass_check:
        set_engine_policy(EnginePolicy(room_check=lambda size, directory, what: None))
    mcb, chunks = 1024 * 1024, 2
    obs: Obs = {"needs": room_at_create(RingLayout(1, mcb, chunks), "pages"),
                "free_at_start": shm_free()}
    w, r = pair(max_chunk_bytes=mcb, max_chunks=chunks)
    ok = True
    for i in range(2 * chunks):  # every chunk of the first ring, filled to its end
        blob = bytes([i]) * (mcb - 100)
        ok = ok and round_trip(w, [r], blob)
    obs["first_still_whole"] = ok
    obs["free_between"] = shm_free()
    obs["listed_between"] = listing()  # names removed at the handshake: looks empty
    if not bypass_check:
        second = lambda: MessageQueue(1, 1, max_chunk_bytes=mcb, max_chunks=chunks)  # noqa: E731
        obs["second"] = error_of(second)
        obs["left_after_failure"] = listing()
    else:
        w2, r2 = pair(max_chunk_bytes=mcb, max_chunks=chunks)
        obs["free_with_second"] = shm_free()
        obs["second_name"] = writer_ring(w2).name
        obs["big"] = error_of(lambda: w2.enqueue(bytes(mcb - 100), timeout=T))
        obs["free_after_big"] = shm_free()
        obs["second_after"] = round_trip(w2, [r2], {"small": list(range(100))})
        obs["first_after"] = round_trip(w, [r], bytes([9]) * (mcb - 100))
        r2.close()
        w2.close()
    r.close()
    w.close()
    if bypass_check:
        obs["control_rc"] = sparse_control()
    return obs


def sparse_control() -> int:
    """The hazard this guards against, shown: a segment sized past the free space but
    not reserved, touched page by page, kills its process with SIGBUS."""
    code = (
        "import mmap,os;fd=os.open('/dev/shm/control',os.O_CREAT|os.O_RDWR,0o600);"
        "os.unlink('/dev/shm/control');st=os.statvfs('/dev/shm');n=st.f_blocks*st.f_frsize*2;"
        "os.ftruncate(fd,n);m=mmap.mmap(fd,n)\nfor i in range(0,n,4096): m[i]=1"
    )
    return subprocess.run([sys.executable, "-c", code], timeout=T).returncode


# --- exit without close ---------------------------------------------------------------


def _readline(proc: subprocess.Popen[bytes], bound: float = T) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], bound)
    return proc.stdout.readline() if ready else b""


def run_cleanup(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "verifiedring", "cleanup", *args], capture_output=True,
        text=True, timeout=T,
    )
    return done.stdout + done.stderr


def exit_without_close(mode: str, phase: str, reaper: str) -> Obs:
    """A writer process (faults.exiter) ends without close() in ``mode``, ``phase``
    ("before" or "after") the handshake; what it left, and who removes it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "faults.exiter", mode, phase], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    obs: Obs = {"pid": proc.pid}
    reader: MessageQueue | None = None
    try:
        handle = pickle.loads(base64.b64decode(_readline(proc)))
        if phase == "after":
            reader = MessageQueue.create_from_handle(handle, 0)
            reader.wait_until_ready(T)
            obs["got"] = reader.dequeue(T)
            obs["ready_line"] = _readline(proc).strip().decode()
        obs["left_before_exit"] = listing()
        assert proc.stdin is not None
        if mode == "sigkill":
            os.kill(proc.pid, signal.SIGKILL)
        elif mode == "killpg":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        _, err = proc.communicate(timeout=T)
        obs["returncode"] = proc.returncode
        obs["stderr"] = err.decode(errors="replace")
        obs["settle_seconds"] = wait_alone()
        if reader is not None:
            reader.close()
            reader = None
        obs["left_after_exit"] = left = listing()
        if left:
            obs["dry_run"] = run_cleanup("--dry-run")
            obs["left_after_dry_run"] = listing()
            if reaper == "create":
                # a later create reaps the dead creator's names
                q = MessageQueue(1, 1, max_chunk_bytes=SMALL)
                mine = (f"shm:vr_{os.getpid()}_", f"tmp:vr-mq-{os.getpid()}-")
                obs["left_after_create"] = [x for x in listing() if not x.startswith(mine)]
                q.close()
            else:
                obs["cleanup"] = run_cleanup()
        obs["left_at_end"] = listing()
    finally:
        if reader is not None:
            reader.close()
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=T)
    return obs


# --- outsiders on the TCP ports -------------------------------------------------------


class Recorder:
    """A TCP proxy in front of ``target`` recording what the client sends (for replay)."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("tcp://").rsplit(":", 1)
        self.target = (host, int(port))
        self.server = socket.create_server((LOOPBACK, 0))
        self.address = f"tcp://{LOOPBACK}:{self.server.getsockname()[1]}"
        self.sent = bytearray()
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            upstream = socket.create_connection(self.target, timeout=T)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        src.settimeout(None)
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if record:
                    self.sent += data
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stop.set()
        self.server.close()


def _tcp(addr: str) -> tuple[str, int]:
    host, port = addr.removeprefix("tcp://").rsplit(":", 1)
    return host, int(port)


def raw_exchange(addr: str, payload: bytes, bound: float = 2.0) -> Obs:
    """Connect raw TCP to ``addr``, send ``payload``, and read what comes back for at
    most ``bound`` s: the bytes received and whether the server closed."""
    got = bytearray()
    closed = False
    with socket.create_connection(_tcp(addr), timeout=bound) as s:
        with contextlib.suppress(OSError):
            s.sendall(payload)
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            s.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                data = s.recv(65536)
            except TimeoutError:
                break
            except OSError:
                closed = True
                break
            if not data:
                closed = True
                break
            got += data
    return {"received": len(got), "closed": closed, "raw": bytes(got[:4096])}


def remote_reader_proc(handle: Handle, pause_after: int, n: int) -> None:
    """Remote reader 1 (a Supervisor task): send each of ``n`` messages on its channel,
    pausing after ``pause_after`` until told "resume"."""
    line = channel()
    with MessageQueue.create_from_handle(handle, 1) as r:
        r.wait_until_ready(T)
        for i in range(n):
            if i == pause_after and line.recv(T) != "resume":
                raise AssertionError("the driver did not say resume")
            line.send(r.dequeue(T))


def _enqueue_past_forged_acks(
    w: MessageQueue, ackers: list[Any], n: int, secret: bytes
) -> list[float]:
    """Enqueue messages ``0..n-1`` (timeout 1 s), each after a forged ack from every
    acker; how long each enqueue took."""
    import zmq

    durations: list[float] = []
    forged = (1).to_bytes(4, "little") + (10**6).to_bytes(8, "little")
    for i in range(n):
        for a in ackers:
            with contextlib.suppress(zmq.Again):
                a.send(forged, zmq.NOBLOCK)
        t0 = time.monotonic()
        w.enqueue((i, secret * 2000), timeout=1.0)  # never delayed by an outsider
        durations.append(time.monotonic() - t0)
    return durations


def outsiders() -> Obs:
    """Outsiders on the writer's two TCP ports -- subscribers (plaintext, made-up CURVE
    keys), raw floods, replays of a real reader's recorded bytes, forged acks -- while
    the writer sends with enqueue(timeout=1) to its one real reader."""
    import zmq
    from support.outsiders import Outsiders

    window, n_msgs, secret = 8, 40, b"SECRET-PAYLOAD-"
    w = QueueWriter(1, 0, connect_ip=LOOPBACK, remote_window=window)
    h = w.export_handle()
    assert h.remote_subscribe_addr and h.remote_ack_addr and h.curve
    sub_rec, ack_rec = Recorder(h.remote_subscribe_addr), Recorder(h.remote_ack_addr)
    proxied = dataclasses.replace(
        h, remote_subscribe_addr=sub_rec.address, remote_ack_addr=ack_rec.address
    )
    pause_after = 16
    reader = Supervisor([Task(remote_reader_proc, (proxied, pause_after, n_msgs), name="reader")])
    reader.start()
    out = reader.channel("reader")
    outsider = Outsiders(h.curve.server_public)
    obs: Obs = {}
    try:
        w.wait_until_ready(T)
        subs = [outsider.socket(zmq.SUB, h.remote_subscribe_addr, keys=k) for k in (False, True)]
        ackers = [outsider.socket(zmq.PUSH, h.remote_ack_addr, keys=k) for k in (False, True)]
        outsider.flood(h.remote_subscribe_addr, h.remote_ack_addr)
        durations = _enqueue_past_forged_acks(w, ackers, pause_after + window, secret)
        # the real reader has taken what it takes before its pause (and acked it)
        got = [out.recv(T) for _ in range(pause_after)]
        obs["window_full"] = error_of(lambda: w.enqueue("over", timeout=0.5))
        obs["replay_sub"] = raw_exchange(h.remote_subscribe_addr, bytes(sub_rec.sent))
        obs["replay_ack"] = raw_exchange(h.remote_ack_addr, bytes(ack_rec.sent))
        obs["replayed_bytes"] = (len(sub_rec.sent), len(ack_rec.sent))
        obs["window_still_full"] = error_of(lambda: w.enqueue("over", timeout=0.5))
        out.send("resume")
        for i in range(pause_after + window, n_msgs):
            t0 = time.monotonic()
            w.enqueue((i, secret * 2000), timeout=T)
            durations.append(time.monotonic() - t0)
        got += [out.recv(T) for _ in range(n_msgs - pause_after)]
        obs["reader_got_all"] = got == [(i, secret * 2000) for i in range(n_msgs)]
        obs["max_enqueue_seconds"] = max(durations[: pause_after + window])
        obs["outsider_frames"] = sum(1 for s in subs if s.poll(300))
        obs["rejected_frames"] = w.rejected_frames
        obs["replay_leaked_secret"] = secret in obs["replay_sub"]["raw"]
        del obs["replay_sub"]["raw"], obs["replay_ack"]["raw"]
    finally:
        outsider.close()
        sub_rec.close()
        ack_rec.close()
        reader.stop()
        w.close()
    return obs


# --- bad input -------------------------------------------------------------------------

BAD_RANKS: list[Any] = [-2, 2**32, 2**40, 1.5, True, "0", None]
BAD_CHUNK_BYTES = [21, 1, 0, -5]  # wire.HEADER_BYTES is 21: a chunk needs one byte more
BAD_TIMEOUTS: list[Any] = [math.nan, -1, -0.001, -math.inf, "1", True, [1]]
UNSPECIFIED_IPS = [
    "0", "0.0", "0.0.0", "0.0.0.0", "00", "0x0", "000.000.000.000", "::", "::0",
    "0000::0000", "0:0:0:0:0:0:0:0", "::0.0.0.0", "", " ", "*", "zero.vr-test",
    "any6.vr-test",
]
#: /etc/hosts lines inside the namespace: names that mean an unspecified address.
HOSTS = {"zero.vr-test": "0.0.0.0", "any6.vr-test": "::"}


def _listeners() -> list[str]:
    """TCP listen addresses (hex, as /proc/net/tcp* shows them) in this namespace."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for row in f.read().splitlines()[1:]:
                cols = row.split()
                if cols[3] == "0A":
                    found.append(cols[1])
    return found


def _altered_geometry(h: Handle) -> Obs:
    """Readers of ``h`` whose ring geometry was altered: what each raised."""
    obs: Obs = {}
    bh = h.buffer_handle
    assert bh is not None
    for label, new in [
        ("same total size", dataclasses.replace(bh, max_chunk_bytes=2 * bh.max_chunk_bytes + 2,
                                                max_chunks=bh.max_chunks // 2)),
        ("more chunks", dataclasses.replace(bh, max_chunks=bh.max_chunks * 2)),
        ("smaller chunks", dataclasses.replace(bh, max_chunk_bytes=bh.max_chunk_bytes // 2)),
    ]:
        e = error_of(functools.partial(
            MessageQueue.create_from_handle, dataclasses.replace(h, buffer_handle=new), 0))
        e["names_value"] = (f"max_chunk_bytes={new.max_chunk_bytes}" in e["message"]
                            and f"max_chunks={new.max_chunks}" in e["message"])
        e["total_bytes"] = (new.layout.total_bytes, bh.layout.total_bytes)
        obs[f"geometry: {label}"] = e
    return obs


def _new_queue_usable() -> bool:
    """A new queue (one local, one remote reader) carries a message."""
    w2 = MessageQueue(2, 1, connect_ip=LOOPBACK, max_chunk_bytes=SMALL)
    h2 = w2.export_handle()
    readers = [MessageQueue.create_from_handle(h2, rank) for rank in (0, 1)]
    w2.wait_until_ready(T)
    for r in readers:
        r.wait_until_ready(T)
    usable = round_trip(w2, readers, "fine")
    for q in (*readers, w2):
        q.close()
    return usable


def bad_inputs() -> Obs:
    """Every bad input once: what it raised, and that the queue (or a new one) still
    works and nothing was left half-built."""
    obs: Obs = {}

    def named(label: str, call: Callable[[], Any], value: Any) -> None:
        e = error_of(call)
        e["names_value"] = repr(value) in e["message"] or str(value) in e["message"]
        e["left"] = listing()
        obs[label] = e

    w = MessageQueue(2, 1, [0], connect_ip=LOOPBACK, max_chunk_bytes=1022, max_chunks=4)
    h = w.export_handle()
    for v in BAD_RANKS:
        named(f"rank={v!r}", functools.partial(MessageQueue.create_from_handle, h, v), v)
    for v in BAD_TIMEOUTS:
        named(f"writer wait_until_ready timeout={v!r}", functools.partial(w.wait_until_ready, v),
              v)
    # altered geometry: same total size ((1022+2)*4 == (2046+2)*2), then other sizes
    obs.update(_altered_geometry(h))
    r0 = MessageQueue.create_from_handle(h, 0)
    r1 = MessageQueue.create_from_handle(h, 1)
    w.wait_until_ready(T)
    r0.wait_until_ready(T)
    for v in BAD_TIMEOUTS:
        named(f"reader wait_until_ready timeout={v!r}",
              functools.partial(r1.wait_until_ready, v), v)
    r1.wait_until_ready(T)
    for v in BAD_TIMEOUTS:
        named(f"enqueue timeout={v!r}", functools.partial(w.enqueue, "x", timeout=v), v)
        named(f"local dequeue timeout={v!r}", functools.partial(r0.dequeue, v), v)
        named(f"remote dequeue timeout={v!r}", functools.partial(r1.dequeue, v), v)
    obs["usable after all"] = round_trip(w, [r0, r1], {"ok": 1}) and round_trip(
        w, [r0, r1], b"y" * 100_000
    )
    for q in (r0, r1, w):
        q.close()
    for v in BAD_CHUNK_BYTES:
        named(f"max_chunk_bytes={v!r}", functools.partial(MessageQueue, 1, 1, max_chunk_bytes=v),
              v)
        named(f"remote max_chunk_bytes={v!r}", functools.partial(
            MessageQueue, 1, 0, max_chunk_bytes=v, connect_ip=LOOPBACK), v)
    before = _listeners()
    for ip in UNSPECIFIED_IPS:
        named(f"connect_ip={ip!r}", functools.partial(
            MessageQueue, 2, 1, connect_ip=ip, max_chunk_bytes=SMALL), ip)
        obs[f"connect_ip={ip!r}"]["listeners"] = [x for x in _listeners() if x not in before]
    obs["new queue usable"] = _new_queue_usable()
    obs["left_at_end"] = listing()
    return obs


def mapped_unspecified() -> Obs:
    """connect_ip="::ffff:0.0.0.0", the IPv4-mapped form of 0.0.0.0: refused like the other
    spellings, or else: where it listens, and whether another address of this host
    (127.0.0.2, which a bind to 127.0.0.1 does not serve) reaches the port."""
    ip = "::ffff:0.0.0.0"
    try:
        w = MessageQueue(1, 0, connect_ip=ip)
    except MisuseError as exc:
        return {"error": type(exc).__name__, "message": str(exc), "names_value": repr(ip) in
                str(exc), "listeners": _listeners()}
    try:
        addr = w.export_handle().remote_subscribe_addr or ""
        port = int(addr.rsplit(":", 1)[1])
        try:
            socket.create_connection(("127.0.0.2", port), timeout=2).close()
            reachable = True
        except OSError:
            reachable = False
        return {"error": None, "address": addr, "listeners": _listeners(),
                "reachable_on_127.0.0.2": reachable}
    finally:
        w.close()


def claimed_twice(channel: str) -> Obs:
    """Two processes claim the same reader rank: the handshake fails naming both."""
    local = channel == "local"
    w = MessageQueue(
        2, 2 if local else 0, [0, 1] if local else [], connect_ip=LOOPBACK,
        max_chunk_bytes=SMALL,
    )
    rank = 0 if local else 2
    run = readers(w.export_handle(), [rank, rank], names=["claimant 0", "claimant 1"])
    run.start()
    obs: Obs = {"pids": [run.pid(n) for n in run.names], "rank": rank}
    try:
        obs["handshake"] = outcome(lambda: w.wait_until_ready(T), bound=T)
    finally:
        stop_readers(run)
        w.close()
    return obs


# --- concurrent creates in one /dev/shm ------------------------------------------------

#: Bytes of each segment in the concurrent-create rounds: two fit the case's /dev/shm.
RACE_SEGMENT = 12 * 1024 * 1024


def _race_creator(start: Any, reports: Any, done: Any) -> None:
    """Create one fully reserved segment at ``start``; report "ok" or the error's
    message; hold the segment until ``done``."""
    from verifiedring.shm import SharedSegment

    start.wait(T)
    try:
        seg = SharedSegment.create(RACE_SEGMENT, what="a racing segment")
    except Exception as exc:
        reports.put(f"{type(exc).__name__}: {exc}")
        return
    reports.put("ok")
    done.wait(T)
    seg.unlink()
    seg.close()


def concurrent_creates(rounds: int, racers: int) -> Obs:
    """``rounds`` times: ``racers`` processes create a segment each at the same moment
    (a barrier) in a /dev/shm that two fit; what each got, per round."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    obs: Obs = {"free": shm_free(), "rounds": []}
    for _ in range(rounds):
        start, done, reports = ctx.Barrier(racers), ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_race_creator, args=(start, reports, done))
                 for _ in range(racers)]
        for p in procs:
            p.start()
        got = [reports.get(timeout=T) for _ in procs]
        done.set()
        for p in procs:
            p.join(T)
        obs["rounds"].append(sorted(got))
        obs["left"] = listing()
    return obs
