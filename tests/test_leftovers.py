"""Nothing left behind: names carry the creator's pid; stale ones are reaped and listed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.fakes import segment_exists

from verifiedring import MessageQueue, ShmRingBuffer, leftovers


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_entries_of_dead_creators_are_found_and_removed(tmp_path: Path) -> None:
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    tmp.mkdir()
    dead, me = _dead_pid(), os.getpid()
    (shm / f"vr_{dead}_00ff").write_bytes(b"x")
    (shm / f"vr_{me}_00ff").write_bytes(b"x")  # alive: kept
    (shm / "other_123_00ff").write_bytes(b"x")  # not ours: kept
    (tmp / f"vr-mq-{dead}-abcd").mkdir()
    (tmp / f"vr-mq-{dead}-abcd" / "local").write_bytes(b"")
    (tmp / f"vr-mq-{me}-abcd").mkdir()
    found = leftovers.stale(str(shm), str(tmp))
    assert sorted(e.path for e in found) == sorted(
        [str(shm / f"vr_{dead}_00ff"), str(tmp / f"vr-mq-{dead}-abcd")]
    )
    assert {e.pid for e in found} == {dead}
    removed = leftovers.reap(str(shm), str(tmp))
    assert len(removed) == 2
    assert sorted(os.listdir(shm)) == sorted([f"vr_{me}_00ff", "other_123_00ff"])
    assert os.listdir(tmp) == [f"vr-mq-{me}-abcd"]
    assert leftovers.stale(str(shm), str(tmp)) == []


def test_names_carry_the_creator_pid() -> None:
    with ShmRingBuffer(1, 64, 2) as ring:
        assert ring.name.startswith(f"vr_{os.getpid()}_")
    q = MessageQueue(1, 1)
    try:
        addr = q.export_handle().local_subscribe_addr
        assert addr is not None
        assert os.path.basename(os.path.dirname(addr)).startswith(f"vr-mq-{os.getpid()}-")
    finally:
        q.close()


def test_a_ring_dropped_without_close_is_unlinked() -> None:
    ring = ShmRingBuffer(1, 64, 2)
    name = ring.name
    del ring
    assert not segment_exists(name)


def test_cleanup_command_lists_and_removes(tmp_path: Path) -> None:
    dead = _dead_pid()
    (tmp_path / f"vr-mq-{dead}-beef").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    run = [sys.executable, "-m", "verifiedring", "cleanup"]
    dry = subprocess.run([*run, "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert f"would remove {tmp_path}/vr-mq-{dead}-beef (creator pid {dead}" in dry.stdout
    assert (tmp_path / f"vr-mq-{dead}-beef").exists()
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
    assert f"removed {tmp_path}/vr-mq-{dead}-beef" in done.stdout
    assert not (tmp_path / f"vr-mq-{dead}-beef").exists()
