"""Multiprocess tests of verifiedring.distributed over gloo (CPU): spawned worlds of 2-3 ranks.

Each world runs many checks (see tests/support/dist_worlds.py); a rank's failure is
re-raised here with its rank and traceback by run_group.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from support import dist_worlds  # noqa: E402

from verifiedring.hosts import CONNECT_IP_ENV, HOST_ID_ENV  # noqa: E402
from verifiedring.testing.launcher import run_group  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def test_world_of_three_writer_2_subgroup_1_2_and_workers() -> None:
    out = run_group(dist_worlds.world_local, 3, timeout=200)
    assert [o["local"] for o in out] == [True, True, "writer"]
    assert "sub_checks" not in out[0]
    assert out[1]["sub_checks"] == out[2]["sub_checks"] > 30
    counts = {o["workers"] for o in out}
    assert len(counts) == 1, f"ranks ran different calls: {out}"
    (count, _digest) = counts.pop()
    assert count == 1000 + 10 + 1  # step calls; fail_on is not counted by Target.step


def test_world_with_a_remote_reader() -> None:
    env = {
        0: {HOST_ID_ENV: "host-a", CONNECT_IP_ENV: "127.0.0.1"},
        1: {HOST_ID_ENV: "host-b", CONNECT_IP_ENV: "127.0.0.1"},
    }
    out = run_group(dist_worlds.world_remote, 2, timeout=200, rank_env=env)
    assert out[0]["remote"] == "writer" and out[1]["remote"] is True
    assert out[0]["checks"] == out[1]["checks"] > 20
