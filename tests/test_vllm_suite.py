"""vLLM's own ``tests/distributed/test_shm_broadcast.py`` passes on verifiedring with
only its imports switched (:mod:`support.vllm_suite`).

vLLM's file is not in this repository: set ``VERIFIEDRING_VLLM_TESTS`` to it (vLLM's
source tree, e.g. its sdist unpacked, has it at ``tests/distributed/``); skipped
otherwise. Its workers start with ``multiprocess``, which vLLM's tests need. Every test
of the file must pass, or be one of :data:`DIFFERENCES` (each a row of the README's
compatibility table, with its reason).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.vllm_suite import write_suite

ROOT = Path(__file__).resolve().parents[1]
SOURCE = os.environ.get("VERIFIEDRING_VLLM_TESTS", "")
#: vLLM's tests that cannot pass here, each with the reason (README's compatibility table).
DIFFERENCES: dict[str, str] = {
    "test_broadcast_retains_values_after_ring_reuse":
        "counts vLLM's internals: its static recv() for an overflow frame and the buffers "
        "it passes to pickle.loads (its 1 MiB out-of-band rule); verifiedring frames its "
        "own messages (wire.py). The retained values it checks are kept (only the "
        "inline/overflow counts differ; shm_oob passes)",
    "test_tensor_broadcast": "counts vLLM's static recv() for an overflow frame",
    "test_busy_reader_consumes_write_notifications":
        "expects a notification queued on the notify socket: a reader sleeps on its futex "
        "word, the socket is a stand-in",
    "test_create_from_handle_tolerates_arena_attach_failure":
        "a reader refuses a handle whose arena was replaced (an altered handle), where "
        "vLLM's attaches without an arena",
    "test_arena_unregisters_pinned_memory_on_del":
        "the arena is never pinned (no cudaHostRegister, no current_platform)",
}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SOURCE, reason="VERIFIEDRING_VLLM_TESTS names no vLLM test file"),
    pytest.mark.skipif(importlib.util.find_spec("multiprocess") is None,
                       reason="vLLM's tests start their workers with multiprocess"),
    pytest.mark.timeout(900),
]
OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+::\S+)", re.M)


def test_vllms_own_test_file_passes_with_only_its_imports_switched(tmp_path: Path) -> None:
    suite = write_suite(Path(SOURCE), tmp_path / "vllm_suite")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
         "-rA", "--rootdir", str(suite.parent), str(suite)],
        cwd=suite.parent, env=env, capture_output=True, text=True, timeout=850,
    )
    outcomes = {name.split("::", 1)[1]: kind for kind, name in OUTCOME.findall(proc.stdout)}
    assert outcomes, proc.stdout[-4000:] + proc.stderr[-4000:]
    failed = {n: k for n, k in outcomes.items() if k in ("FAILED", "ERROR")}
    assert {n for n in failed if n.split("[")[0] not in DIFFERENCES} == set(), (
        proc.stdout[-20000:])
