"""``python -m bench.engine``: ``make engine-check``. Builds (or reuses) the engine venv,
runs the engine on vLLM's queue and on verifiedring's, ``--rounds`` times in turn, then
once on verifiedring in a private 64 MiB ``/dev/shm`` (Docker's default); prints what
each run showed and the figures as ratios to vLLM's runs. Exit status 0 when every run
was clean, every verifiedring run generated vLLM's tokens, and the 64 MiB run either did
too or was refused for room (``--shm64 must-run`` makes a refusal fail)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from verifiedring.testing.namespaces import MIB, unavailable_reason

from . import venv
from .check import Run, compare, run_engine
from .hosts import run_two_hosts

#: What a run refused for room raised.
REFUSED = "SharedMemoryFullError: "
DOCKER_SHM = 64 * MIB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32, help="tokens generated per prompt")
    parser.add_argument("--rounds", type=int, default=1, help="vLLM-then-verifiedring pairs")
    parser.add_argument("--shm64", choices=("may-refuse", "must-run", "skip"),
                        default="may-refuse", help="the 64 MiB /dev/shm run")
    parser.add_argument("--hosts", choices=("run", "skip"), default="run",
                        help="the run across two namespace hosts, on verifiedring")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason is not None:
        print(f"engine-check needs namespaces: {reason}")
        return 2
    start = time.monotonic()
    built = venv.ensure()
    print(f"venv {venv.VENV.name} ({venv.VLLM}): "
          + (f"built in {built:.0f} s" if built else "cached"), flush=True)
    size = {"prompts": args.prompts, "tokens": args.tokens, "timeout": args.timeout}
    pairs: list[tuple[Run, Run]] = []
    failed = False
    for _ in range(args.rounds):
        base, other = (_one(q, **size) for q in ("vllm", "verifiedring"))
        pairs.append((base, other))
        differs = _differs(base, other)
        failed |= bool(base.problems or other.problems or differs)
    if args.shm64 != "skip":
        failed |= _shm64(pairs[0][0], _one("verifiedring", shm_bytes=DOCKER_SHM, **size),
                         must_run=args.shm64 == "must-run")
    if args.hosts == "run":
        failed |= _two_hosts(pairs[0][0], **size)
    _ratios(pairs)
    print(f"engine-check: {'FAILED' if failed else 'ok'}, {len(pairs)} round(s), "
          f"{time.monotonic() - start:.0f} s in all")
    return int(failed)


def _two_hosts(base: Run, *, prompts: int, tokens: int, timeout: float) -> bool:
    """Whether the run across two hosts failed (problems, or tokens not vLLM's)."""
    t = time.monotonic()
    runs = run_two_hosts("verifiedring", prompts=prompts, tokens=tokens, timeout=timeout)
    print(f"run verifiedring across two hosts: {time.monotonic() - t:.0f} s", flush=True)
    for i, run in enumerate(runs):
        _show(f"host {i}: ", run)
    return any(r.problems for r in runs) | _differs(base, runs[0])


def _one(queue: str, *, prompts: int, tokens: int, timeout: float,
         shm_bytes: int = 1024 * MIB) -> Run:
    t = time.monotonic()
    run = run_engine(queue, prompts=prompts, tokens=tokens, timeout=timeout, shm_bytes=shm_bytes)
    shm = f"{run.shm_bytes // MIB} MiB /dev/shm"
    print(f"run {queue:12} ({shm}): {time.monotonic() - t:5.0f} s, {run.step_s * 1e3:.1f} ms "
          f"per step", flush=True)
    _show("", run)
    return run


def _show(label: str, run: Run) -> None:
    print(f"  {label}/dev/shm after exit: {list(run.result.shm_left)}, processes left: "
          f"{list(run.result.stragglers + tuple(map(str, run.result.lingering)))}")
    print("  queues built, from inside each process: " + "; ".join(
        f"{name}: {', '.join(c.rsplit('.', 1)[-1] for c in run.queue_classes(name)) or '-'}"
        for name in sorted(run.records) if name != "MainProcess"
    ))
    print(f"  output: {run.log}")
    for problem in run.problems:
        print(f"  PROBLEM: {problem}")


def _differs(base: Run, other: Run) -> bool:
    diffs = compare(base, other)
    n = len(base.tokens or [])
    print(f"  tokens: {'identical' if not diffs else 'DIFFER'} to vLLM's "
          f"({n} prompts x {base.steps} tokens)")
    for d in diffs[:5]:
        print(f"  {d}")
    return bool(diffs)


def _shm64(base: Run, run: Run, *, must_run: bool) -> bool:
    """Whether the 64 MiB run failed: it ran and differs, or was refused and had to run."""
    refusal = next((ln for ln in (run.result.stderr + run.result.stdout).splitlines()
                    if REFUSED in ln), None)
    if run.tokens is None and refusal is not None:
        verdict = "FAILED" if must_run else "expected until the room policy lands"
        print(f"  64 MiB: refused for room ({verdict}): {refusal.split(REFUSED, 1)[1]}")
        return must_run
    return bool(run.problems) or _differs(base, run)


def _ratios(pairs: list[tuple[Run, Run]]) -> None:
    steps = [o.step_s / b.step_s for b, o in pairs if b.tokens and o.tokens]
    if steps:
        print(f"time per step, verifiedring / vLLM: {statistics.median(steps):.2f}x "
              f"(median of {len(steps)}; vLLM {pairs[0][0].step_s * 1e3:.1f} ms)")
    for name in sorted(pairs[0][0].cpu()):
        ratios = [o.cpu()[name] / b.cpu()[name] for b, o in pairs
                  if name in o.cpu() and name in b.cpu()]
        if ratios:
            print(f"CPU of {name}, verifiedring / vLLM: {statistics.median(ratios):.2f}x "
                  f"(vLLM {pairs[0][0].cpu()[name]:.1f} s)")


if __name__ == "__main__":
    sys.exit(main())
