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
    records = work / "records"
    records.mkdir()
    model = write_model(work / "model")
    out = work / "out.json"
    env = {
        **ENGINE_ENV, "PYTHONPATH": os.pathsep.join([str(SITE), str(venv.ROOT)]),
        "VERIFIEDRING_ENGINE_QUEUE": queue, "VERIFIEDRING_ENGINE_RECORDS": str(records),
    }
    venv.TMP.mkdir(exist_ok=True)
    argv = [
        "env", f"TMPDIR={venv.TMP}", str(venv.python()), "-m", "bench.engine.run", str(out),
        "--model", str(model),        "--prompts", str(prompts), "--tokens", str(tokens),
    ]
    sandbox = Sandbox(
        shm_bytes=shm_bytes, tmp_bytes=64 * MIB, hostname=f"engine-{queue}", timeout=timeout,
        settle=10.0, env=env, cwd=str(venv.ROOT),
    )
    result = run_command(argv, sandbox)
    log = work / "output.txt"
    log.write_text(
        f"exit {result.returncode}, timed out {result.timed_out}, /dev/shm left "
        f"{list(result.shm_left)}, stragglers {list(result.stragglers)}\n--- stdout ---\n"
        f"{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
    run = Run(queue, shm_bytes, result, log=log)
    if out.exists():
        found = json.loads(out.read_text())
        run.tokens, run.generate_s = found["tokens"], found["generate_s"]
        run.steps, run.pid = found["steps"], found["pid"]
    run.records = _read_records(records)
    run.problems = _problems(run)
    return run


def _read_records(folder: Path) -> dict[str, list[dict[str, Any]]]:
    by_process: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            by_process.setdefault(record["process"], []).append(record)
    return by_process


def _problems(run: Run) -> list[str]:
    r = run.result
    found = []
    if r.returncode != 0 or r.timed_out or r.setup_error:
        found.append(
            f"the engine exited {r.returncode} (timed out: {r.timed_out}, setup: {r.setup_error})"
        )
    if run.tokens is None:
        found.append("the engine wrote no tokens")
    left = [n for n in r.shm_left if not VLLM_LEFT.fullmatch(n)]
    if left:
        found.append(f"left in /dev/shm: {left}")
    if r.stragglers or r.lingering:
        found.append(f"processes outlived the engine: {list(r.stragglers)} {list(r.lingering)}")
    for line in (r.stdout + r.stderr).splitlines():
        if any(m in line for m in CRASH_MARKERS):
            found.append(f"crash: {line.strip()}")
    names = sorted(run.records)
    exited = run.cpu()
    found += [
        f"{n} recorded no exit (crashed or killed)"
        for n in [*names, "LLM"] if n not in exited and n != "MainProcess"
    ]
    found += _queue_problems(run, names)
    return found


def _queue_problems(run: Run, names: Sequence[str]) -> list[str]:
    """Each engine core and worker used verifiedring's queue (both a writer and a reader),
    as it recorded from inside; on vLLM's queue, none of them did."""
    checked = [n for n in names if n.startswith((ENGINE_CORE, WORKER))]
    workers = [n for n in checked if n.startswith(WORKER)]
    found = []
    if len(workers) != 2 or len(checked) != 3:
        found.append(f"expected an engine core and 2 workers, the processes were {list(names)}")
    for name in checked:
        classes = run.queue_classes(name)
        if run.queue == "vllm" and classes:
            found.append(f"{name} built verifiedring queues on vLLM's run: {classes}")
        if run.queue == "verifiedring" and not (
            "verifiedring.queue.writer.QueueWriter" in classes
            and "verifiedring.queue.local_reader.LocalReader" in classes
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
