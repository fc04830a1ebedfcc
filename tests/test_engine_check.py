"""``make engine-check``'s verdicts (``bench/engine/check.py``) on made-up runs: what
counts as a problem, and how two runs' tokens are compared. The engine itself runs
only in ``make engine-check`` (its own venv, minutes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.engine.check import Run, _problems, compare
from verifiedring.testing.namespaces import MIB, NamespaceResult

WRITER = "verifiedring.queue.writer.QueueWriter"
READER = "verifiedring.queue.local_reader.LocalReader"


def _result(**changes: Any) -> NamespaceResult:
    fields: dict[str, Any] = {
        "returncode": 0, "stdout": "", "stderr": "", "timed_out": False, "elapsed": 1.0,
        "shm_left": (), "tmp_left": (), "stragglers": (), "lingering": (),
    }
    fields.update(changes)
    return NamespaceResult(**fields)


def _records(queue_classes: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The records of a clean TP=2 run: each engine process built ``queue_classes``."""
    records: dict[str, list[dict[str, Any]]] = {
        "MainProcess": [{"event": "exit", "pid": 1, "process": "MainProcess", "cpu_s": 1.0}]
    }
    for pid, name in ((2, "EngineCore"), (3, "VllmWorker-0"), (4, "VllmWorker-1")):
        records[name] = [
            *({"event": "queue", "pid": pid, "process": name, "cls": c} for c in queue_classes),
            {"event": "exit", "pid": pid, "process": name, "cpu_s": 2.0},
        ]
    return records


def _run(queue: str, classes: list[str], **changes: Any) -> Run:
    run = Run(queue, 1024 * MIB, _result(**changes), tokens=[[5, 6]], steps=2, pid=1)
    run.records = _records(classes)
    return run


def test_a_clean_run_on_either_queue_has_no_problems() -> None:
    assert _problems(_run("verifiedring", [WRITER, READER])) == []
    assert _problems(_run("vllm", [])) == []


def test_a_run_that_left_a_segment_and_saw_a_segfault_lists_both() -> None:
    """vLLM's CPU communicator's segments are not counted: vLLM leaves them on either
    queue."""
    run = _run(
        "verifiedring", [WRITER, READER],
        shm_left=("vllm_dist_c6a9-tp:0-[0-1]-cpushm_0", "psm_1"),
        stderr="ok\nFatal Python error: Segmentation fault\n",
    )
    assert _problems(run) == [
        "left in /dev/shm: ['psm_1']", "crash: Fatal Python error: Segmentation fault",
    ]


def test_a_worker_without_a_verifiedring_reader_fails_the_verifiedring_run() -> None:
    run = _run("verifiedring", [WRITER, READER])
    run.records["VllmWorker-1"] = [
        r for r in run.records["VllmWorker-1"] if r.get("cls") != READER
    ]
    assert _problems(run) == [
        f"VllmWorker-1 did not build a verifiedring writer and reader: ['{WRITER}']"
    ]


def test_a_process_without_its_exit_record_is_named() -> None:
    run = _run("vllm", [])
    run.records["EngineCore"] = []
    assert _problems(run) == ["EngineCore recorded no exit (crashed or killed)"]


def test_compare_names_each_prompt_whose_tokens_differ() -> None:
    base = _run("vllm", [])
    other = _run("verifiedring", [WRITER, READER])
    base.tokens, other.tokens = [[1, 2], [3, 4], [5, 6]], [[1, 2], [3, 9], [5, 6]]
    assert compare(base, other) == ["prompt 1: [3, 9] != [3, 4]"]
    other.tokens = [[1, 2]]
    assert compare(base, other) == ["1 prompts answered, expected 3"]


def test_a_headless_node_is_checked_without_tokens_or_an_engine_core() -> None:
    run = _run("verifiedring", [WRITER, READER])
    run.tokens, run.pid = None, 0
    del run.records["EngineCore"], run.records["VllmWorker-0"]
    assert _problems(run, workers=1, cores=0) == []
    assert _problems(run) == [
        "the engine wrote no tokens",
        "LLM recorded no exit (crashed or killed)",
        "expected 1 engine core(s) and 2 worker(s), the processes were "
        "['MainProcess', 'VllmWorker-1']",
    ]


def test_a_traceback_logged_at_error_is_told_by_its_first_and_last_line() -> None:
    output = "\n".join([
        "(Worker_TP1 pid=11) ERROR [x.py:1] WorkerProc failed.",
        "(Worker_TP1 pid=11) ERROR [x.py:1] Traceback (most recent call last):",
        "(Worker_TP1 pid=11) ERROR [x.py:1] ClosedError: the writer shut the queue down",
        "(MainProcess pid=5) INFO [y.py:2] fine",
        "(MainProcess pid=5) ERROR [y.py:3] Worker proc VllmWorker-1 died unexpectedly",
    ])
    run = _run("verifiedring", [WRITER, READER], stderr=output)
    assert _problems(run) == [
        "crash: (Worker_TP1 pid=11) ERROR [x.py:1] WorkerProc failed.",
        "crash: (Worker_TP1 pid=11) ERROR [x.py:1] ClosedError: the writer shut the queue down",
        "crash: (MainProcess pid=5) ERROR [y.py:3] Worker proc VllmWorker-1 died unexpectedly",
    ]


def test_compat_ends_are_recorded_as_the_core_ends_they_are(tmp_path: Path) -> None:
    """The engine's processes build compat's vLLM-shaped roles (subclasses of the core
    ends): each is recorded as its core end, which is what the check looks for."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "VERIFIEDRING_ENGINE_RECORDS": str(tmp_path),
           "VERIFIEDRING_ENGINE_QUEUE": "verifiedring",
           "PYTHONPATH": os.pathsep.join([str(root / "bench/engine/site"), str(root / "src")])}
    code = ("from verifiedring.compat.vllm import MessageQueue\n"
            "w = MessageQueue(1, 1)\n"
            "r = MessageQueue.create_from_handle(w.export_handle(), 0)\n"
            "r.close(); w.close()\n")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    (records,) = tmp_path.glob("*.jsonl")
    ends = [json.loads(line) for line in records.read_text().splitlines()]
    assert [e["cls"] for e in ends if e["event"] == "queue"] == [WRITER, READER]
