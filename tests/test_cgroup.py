"""The memory cgroup headroom check, over fake cgroup trees (v1, v2, hybrid, none)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from verifiedring import shm
from verifiedring.cgroup import (
    V1_UNLIMITED,
    Headroom,
    check_cgroup_memory_available,
    memory_headroom,
)
from verifiedring.engine import EnginePolicy, engine_policy, set_engine_policy

MIB = 1 << 20


def _tree(tmp: Path, proc: str, files: dict[str, str]) -> tuple[str, str]:
    (tmp / "proc").write_text(proc)
    root = tmp / "cg"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp / "proc"), str(root)


def test_v2_reads_this_processs_own_cgroup(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "0::/kubepods/pod1/c1\n", {
        "memory.max": "max\n",  # the root's: not this process's cgroup
        "kubepods/pod1/c1/memory.max": f"{512 * MIB}\n",
        "kubepods/pod1/c1/memory.current": f"{500 * MIB}\n",
    })
    room = memory_headroom(proc, root)
    assert room == Headroom(512 * MIB, 500 * MIB, f"{root}/kubepods/pod1/c1")
    assert room.available == 12 * MIB


def test_v2_max_and_missing_files_are_no_limit(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "0::/a\n", {"a/memory.max": "max\n", "a/memory.current": "5\n"})
    assert memory_headroom(proc, root) is None
    proc, root = _tree(tmp_path, "0::/b\n", {"b/memory.max": "100\n"})  # no memory.current
    assert memory_headroom(proc, root) is None
    assert memory_headroom(str(tmp_path / "absent"), root) is None


def test_v1_memory_controller_and_its_unlimited_sentinel(tmp_path: Path) -> None:
    proc, root = _tree(tmp_path, "12:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n", {
        "memory/docker/abc/memory.limit_in_bytes": f"{1024 * MIB}\n",
        "memory/docker/abc/memory.usage_in_bytes": f"{1100 * MIB}\n",
    })
    room = memory_headroom(proc, root)
    assert room is not None and (room.limit, room.usage) == (1024 * MIB, 1100 * MIB)
    assert room.available == 0  # over the limit: no headroom, never negative
    (Path(root) / "memory/docker/abc/memory.limit_in_bytes").write_text(f"{V1_UNLIMITED}\n")
    assert memory_headroom(proc, root) is None


def test_low_headroom_warns_enough_logs_debug_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc, root = _tree(tmp_path, "0::/c\n", {
        "c/memory.max": f"{100 * MIB}\n", "c/memory.current": f"{90 * MIB}\n",
    })
    caplog.set_level(logging.DEBUG, logger="verifiedring")
    room = check_cgroup_memory_available(20 * MIB, "ring", proc_self_cgroup=proc, root=root)
    assert room is not None and room.available == 10 * MIB
    [rec] = caplog.records
    assert rec.levelno == logging.WARNING and "for ring: 20.0 MiB required" in rec.getMessage()
    assert "10.0 MiB available" in rec.getMessage()
    caplog.clear()
    check_cgroup_memory_available(5 * MIB, "ring", proc_self_cgroup=proc, root=root)
    [rec] = caplog.records
    assert rec.levelno == logging.DEBUG and "reclaimable" not in rec.getMessage()


def test_the_segment_create_runs_the_room_check_in_use() -> None:
    seen: list[tuple[int, str, str]] = []
    old = set_engine_policy(
        EnginePolicy(room_check=lambda size, d, what: seen.append((size, d, what)))
    )
    try:
        seg = shm.SharedSegment.create(4096)
        seg.close()
        seg.unlink()
    finally:
        set_engine_policy(old)
    assert seen == [(4096, shm.SHM_DIR, "the ring's segment")]
    assert engine_policy().room_check is None
