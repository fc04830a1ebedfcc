"""The engine runs and what each must show.

A run is one ``python -m bench.engine.run`` in fresh namespaces (a private ``/dev/shm``
of the given size, its own PID namespace): :func:`run_engine` returns what it generated
and every problem seen; :func:`compare` sets a verifiedring run against vLLM's.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiedring.testing.namespaces import MIB, NamespaceResult, Sandbox, run_command

from . import venv
from .run import write_model

#: The queues a run may use (``VERIFIEDRING_ENGINE_QUEUE``).
QUEUES = ("vllm", "verifiedring")
SITE = Path(__file__).resolve().parent / "site"
#: Lines of a run's output that mean a process crashed, the engine saw one die, or
#: something logged an error.
CRASH_MARKERS = (
    "Fatal Python error", "Segmentation fault", "died unexpectedly", "core dumped", " ERROR ",
)
#: What vLLM 0.32's CPU communicator leaves in /dev/shm at every exit, on its own queue
#: too (its all-reduce segments; no queue's): reported, not a problem of the run.
VLLM_LEFT = re.compile(r"vllm_dist_[0-9a-f]+-.*-cpushm_\d+")
WRITER = "verifiedring.queue.writer.QueueWriter"
LOCAL_READER = "verifiedring.queue.local_reader.LocalReader"
REMOTE_READER = "verifiedring.queue.remote_reader.RemoteReader"
#: The processes of a TP=2 engine with the mp executor whose queues are checked.
ENGINE_CORE = "EngineCore"
WORKER = "VllmWorker"
#: The engine's environment: no CPU binding (the machine is shared), a small KV cache,
#: one OpenMP thread per process, workers spawned (a fresh interpreter loads
#: sitecustomize), the loopback as the host's address. The run's TMPDIR is the venv's
#: (``venv.TMP``): torch builds its C++ kernels there once, not in every run.
ENGINE_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "OMP_NUM_THREADS": "1",
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
}


@dataclass
class Run:
    """One engine run: what it generated, what each process recorded, what went wrong."""

    queue: str
    shm_bytes: int
    result: NamespaceResult
    #: the run's whole output
    log: Path | None = None
    tokens: list[list[int]] | None = None
    generate_s: float = 0.0
    steps: int = 0
    #: the pid of the process that ran ``LLM(...)`` (its name is MainProcess, like
    #: torch's compile helpers')
    pid: int = 0
    #: process name -> its records (``site/sitecustomize.py``)
    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def step_s(self) -> float:
        """Seconds per engine step of the timed generate call."""
        return self.generate_s / self.steps if self.steps else float("nan")

    def cpu(self) -> dict[str, float]:
        """CPU seconds of the engine's processes that recorded their exit: ``LLM`` (the
        process that made it), the engine core, the workers."""
        return {
            "LLM" if r["pid"] == self.pid else name: r["cpu_s"]
            for name, recs in self.records.items() for r in recs
            if r["event"] == "exit" and (r["pid"] == self.pid or name != "MainProcess")
        }

    def queue_classes(self, process: str) -> list[str]:
        """The verifiedring queue ends ``process`` constructed, in order."""
        return [r["cls"] for r in self.records.get(process, []) if r["event"] == "queue"]


def run_engine(
    queue: str, *, prompts: int, tokens: int, shm_bytes: int = 1024 * MIB,
    timeout: float = 600.0,
) -> Run:
    """One engine run on ``queue`` in fresh namespaces; its problems listed, not raised."""
    work = Path(tempfile.mkdtemp(prefix="engine-run-"))
    argv, env = engine_command(queue, work, prompts, tokens)
    sandbox = Sandbox(
        shm_bytes=shm_bytes, tmp_bytes=64 * MIB, hostname=f"engine-{queue}", timeout=timeout,
        settle=10.0, env=env, cwd=str(venv.ROOT),
    )
    return collect(Run(queue, shm_bytes, run_command(argv, sandbox)), work)


def engine_command(
    queue: str, work: Path, prompts: int, tokens: int, *extra: str
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one engine process (``bench.engine.run``)
    whose model, records and result live in ``work``."""
    records = work / "records"
    records.mkdir()
    env = {
        **ENGINE_ENV, "PYTHONPATH": os.pathsep.join([str(SITE), str(venv.ROOT)]),
        "VERIFIEDRING_ENGINE_QUEUE": queue, "VERIFIEDRING_ENGINE_RECORDS": str(records),
    }
    venv.TMP.mkdir(exist_ok=True)
    argv = [
        "env", f"TMPDIR={venv.TMP}", str(venv.python()), "-m", "bench.engine.run",
        str(work / "out.json"), "--model", str(write_model(work / "model")),
        "--prompts", str(prompts), "--tokens", str(tokens), *extra,
    ]
    return argv, env


def collect(run: Run, work: Path, workers: int = 2, cores: int = 1) -> Run:
    """``run`` with what its processes wrote in ``work`` and its problems (``workers``
    and ``cores``: how many of the engine's workers and engine cores ran there)."""
    result = run.result
    run.log = work / "output.txt"
    run.log.write_text(
        f"exit {result.returncode}, timed out {result.timed_out}, /dev/shm left "
        f"{list(result.shm_left)}, stragglers {list(result.stragglers)}\n--- stdout ---\n"
        f"{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
    out = work / "out.json"
    if out.exists():
        found = json.loads(out.read_text())
        run.tokens, run.generate_s = found["tokens"], found["generate_s"]
        run.steps, run.pid = found["steps"], found["pid"]
    run.records = _read_records(work / "records")
    run.problems = _problems(run, workers, cores)
    return run


def _read_records(folder: Path) -> dict[str, list[dict[str, Any]]]:
    by_process: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            by_process.setdefault(record["process"], []).append(record)
    return by_process


def _problems(run: Run, workers: int = 2, cores: int = 1) -> list[str]:
    r = run.result
    found = []
    if r.returncode != 0 or r.timed_out or r.setup_error:
        found.append(
            f"the engine exited {r.returncode} (timed out: {r.timed_out}, setup: {r.setup_error})"
        )
    if cores and run.tokens is None:  # the node that made the LLM
        found.append("the engine wrote no tokens")
    left = [n for n in r.shm_left if not VLLM_LEFT.fullmatch(n)]
    if left:
        found.append(f"left in /dev/shm: {left}")
    if r.stragglers or r.lingering:
        found.append(f"processes outlived the engine: {list(r.stragglers)} {list(r.lingering)}")
    found += _crashes(r.stdout + r.stderr)
    names = sorted(run.records)
    exited = run.cpu()
    found += [
        f"{n} recorded no exit (crashed or killed)"
        for n in [*names, *(["LLM"] if cores else [])]
        if n not in exited and n != "MainProcess"
    ]
    found += _queue_problems(run, names, workers, cores)
    return found


def _crashes(output: str) -> list[str]:
    """The first line of each process (vLLM's ``(name pid=N)`` prefix) that carries a
    crash marker, and the last such line if it differs (a traceback's error)."""
    lines: dict[str, list[str]] = {}
    for line in output.splitlines():
        if any(m in line for m in CRASH_MARKERS):
            who = line.split(")", 1)[0] if line.startswith("(") else ""
            lines.setdefault(who, []).append(line.strip())
    return [f"crash: {x}" for seen in lines.values() for x in dict.fromkeys([seen[0], seen[-1]])]


def _queue_problems(run: Run, names: Sequence[str], workers: int, cores: int) -> list[str]:
    """Each engine core and worker used verifiedring's queue (both a writer and a reader),
    as it recorded from inside; on vLLM's queue, none of them did."""
    checked = [n for n in names if n.startswith((ENGINE_CORE, WORKER))]
    found = []
    if sum(n.startswith(WORKER) for n in checked) != workers or len(checked) != workers + cores:
        found.append(f"expected {cores} engine core(s) and {workers} worker(s), the processes "
                     f"were {list(names)}")
    for name in checked:
        classes = run.queue_classes(name)
        if run.queue == "vllm" and classes:
            found.append(f"{name} built verifiedring queues on vLLM's run: {classes}")
        if run.queue == "verifiedring" and not (
            WRITER in classes and (LOCAL_READER in classes or REMOTE_READER in classes)
        ):
            found.append(f"{name} did not build a verifiedring writer and reader: {classes}")
    return found


def compare(base: Run, other: Run) -> list[str]:
    """What differs between ``other``'s tokens and ``base``'s (empty: identical)."""
    if base.tokens is None or other.tokens is None:
        return ["no tokens to compare"]
    if len(base.tokens) != len(other.tokens):
        return [f"{len(other.tokens)} prompts answered, expected {len(base.tokens)}"]
    return [
        f"prompt {i}: {o} != {b}"
        for i, (b, o) in enumerate(zip(base.tokens, other.tokens, strict=True)) if b != o
    ]
