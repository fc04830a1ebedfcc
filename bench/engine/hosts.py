"""The engine across two namespace hosts: one worker per host.

Host a (node 0) makes the ``LLM`` with ``nnodes=2``: its engine core and worker 0;
host b (node 1) runs vLLM's headless workers (worker 1). The executor's broadcast then
has a local reader on host a and a remote reader on host b (with ``install()``,
verifiedring's CurveZMQ reader), and worker 1's responses cross to host a the same
way. Once node 0 has its tokens and has shut its engine down, host b's headless node
is stopped as an operator would (SIGTERM). Each host is a
:mod:`verifiedring.testing.multihost` namespace host: its own host name, network, IPC
namespace and ``/dev/shm``.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
from pathlib import Path

from verifiedring.testing.multihost import MultiHost, Site

from .check import Run, collect, engine_command

#: Seconds host b waits, after node 0 ended, for its headless node to end on SIGTERM.
STOP_WAIT = 60.0


def node(site: Site, queue: str, work: str, prompts: int, tokens: int, timeout: float) -> int:
    """Host ``site``'s part (inside its namespace): its engine process's exit status."""
    argv, env = engine_command(
        queue, Path(work), prompts, tokens, "--master-addr", site.addresses[0],
        *(["--headless"] if site.index else []),
    )
    env["VLLM_HOST_IP"] = site.address
    command = ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
    if site.index == 0:
        status = subprocess.run(command, timeout=timeout).returncode
        site.put("node 0 ended", status)
        return status
    headless = subprocess.Popen(command)
    try:
        site.get("node 0 ended", timeout)
    finally:
        headless.send_signal(signal.SIGTERM)
        status = headless.wait(STOP_WAIT)
    return status


def run_two_hosts(queue: str, *, prompts: int, tokens: int, timeout: float) -> list[Run]:
    """The two hosts' runs (node 0's has the tokens); their problems listed."""
    works = [Path(tempfile.mkdtemp(prefix=f"engine-host{i}-")) for i in range(2)]
    calls = [(node, (queue, str(w), prompts, tokens, timeout)) for w in works]
    with MultiHost(calls, timeout=timeout + STOP_WAIT, shm_bytes=1024 * 1024 * 1024,
                   tmp_bytes=64 * 1024 * 1024, settle=10.0) as hosts:
        results = hosts.run()
        left = hosts.leftovers()
    runs = [
        collect(Run(queue, 1024 * 1024 * 1024, r), w, workers=1, cores=int(i == 0))
        for i, (r, w) in enumerate(zip(results, works, strict=True))
    ]
    runs[0].problems += [f"left after the hosts: {x}" for x in left]
    for r in runs:
        if r.result.value != 0:
            r.problems.append(f"the host's engine process exited {r.result.value}")
    return runs
