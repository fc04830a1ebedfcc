"""``run_case``: one driver of :mod:`faults.drivers` in its own namespaces."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from faults.drivers import HOST
from verifiedring.testing.namespaces import MIB, NamespaceResult, Sandbox, run_callable


def run_case(
    driver: Callable[..., Any], *args: Any, shm_bytes: int = 16 * MIB, timeout: float = 60.0,
    hosts: dict[str, str] | None = None,
) -> tuple[Any, NamespaceResult]:
    """Run ``driver(*args)`` in fresh namespaces (a /dev/shm of ``shm_bytes``, TMPDIR,
    host name HOST); check the run itself; return the driver's observations and the
    run (what it left in /dev/shm and TMPDIR)."""
    result = run_callable(
        driver, *args,
        sandbox=Sandbox(shm_bytes=shm_bytes, tmp_bytes=4 * MIB, hostname=HOST, timeout=timeout,
                        settle=3.0, hosts=hosts or {}),
    )
    obs = result.check()  # exited 0, in time, raised nothing; no process left
    assert result.stragglers == (), result.describe()
    return obs, result
