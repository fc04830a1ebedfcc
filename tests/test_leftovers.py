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


def test_stale_entries_are_the_complete_ones_nobody_holds(tmp_path: Path) -> None:
    """Liveness is the entry's lock, never a pid (which may be another PID namespace's):
    an unlocked complete entry is stale whatever pid its name carries, this process's
    included; a locked one is kept; an empty unlocked one is kept (being made)."""
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    tmp.mkdir()
    me = os.getpid()
    locks: list[int] = []

    def held(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
        locks.append(fd)
        leftovers.hold(fd)

    (shm / f"vr_{me}_00ff").write_bytes(b"x")  # this pid, nobody holds it: stale
    (shm / "vr_7_00ff").write_bytes(b"x")
    held(shm / "vr_7_00ff")  # held: kept
    (shm / "vr_8_00ff").write_bytes(b"")  # empty and young: being made, kept
    (shm / "other_123_00ff").write_bytes(b"x")  # not ours: kept
    for pid, lock, fill in ((me, False, True), (7, True, True), (8, False, False)):
        d = tmp / f"vr-mq-{pid}-abcd"
        d.mkdir()
        if fill:
            (d / "local").write_bytes(b"")
        if lock:
            held(d)
    try:
        found = leftovers.stale(str(shm), str(tmp))
        assert sorted(e.path for e in found) == sorted(
            [str(shm / f"vr_{me}_00ff"), str(tmp / f"vr-mq-{me}-abcd")]
        )
        assert {e.pid for e in found} == {me}
        removed = leftovers.reap(str(shm), str(tmp))
        assert len(removed) == 2
        assert sorted(os.listdir(shm)) == sorted(["vr_7_00ff", "vr_8_00ff", "other_123_00ff"])
        assert sorted(os.listdir(tmp)) == ["vr-mq-7-abcd", "vr-mq-8-abcd"]
        assert leftovers.stale(str(shm), str(tmp)) == []
    finally:
        for fd in locks:
            os.close(fd)
    assert sorted(e.path for e in leftovers.stale(str(shm), str(tmp))) == sorted(
        [str(shm / "vr_7_00ff"), str(tmp / "vr-mq-7-abcd")]
    )  # let go: stale now


def test_a_live_queues_entries_are_held() -> None:
    q = MessageQueue(1, 1)
    try:
        h = q.export_handle()
        assert h.buffer_handle is not None and h.local_subscribe_addr is not None
        seg = f"/dev/shm/{h.buffer_handle.name}"
        ipc = os.path.dirname(h.local_subscribe_addr.removeprefix("ipc://"))
        assert leftovers.in_use(seg) and leftovers.in_use(ipc)
    finally:
        q.close()


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
    (tmp_path / f"vr-mq-{dead}-beef" / "local").write_bytes(b"")  # complete, nobody holds it
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    run = [sys.executable, "-m", "verifiedring", "cleanup"]
    dry = subprocess.run([*run, "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert f"would remove {tmp_path}/vr-mq-{dead}-beef (creator pid {dead}" in dry.stdout
    assert (tmp_path / f"vr-mq-{dead}-beef").exists()
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
    assert f"removed {tmp_path}/vr-mq-{dead}-beef" in done.stdout
    assert not (tmp_path / f"vr-mq-{dead}-beef").exists()
