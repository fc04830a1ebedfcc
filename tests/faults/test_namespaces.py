"""The namespace helper itself: private /dev/shm, TMPDIR and network; bounded; always
cleaned up (no process, no mount, no work directory left), whatever the target does."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

import pytest

from verifiedring.testing import namespaces
from verifiedring.testing.namespaces import (
    MIB,
    Namespace,
    Sandbox,
    namespaces_available,
    run_callable,
    run_command,
)
from verifiedring.testing.ns_host import await_teardown


def _gone(work: str) -> None:
    assert not os.path.exists(work), f"work directory {work} left"
    with open("/proc/self/mountinfo") as f:
        assert work not in f.read(), "a mount of the run is visible on the host"


def test_private_shm_tmpdir_host_name_and_network() -> None:
    assert namespaces_available()
    code = (
        "import os,socket,tempfile;s=os.statvfs('/dev/shm');"
        "print(s.f_blocks*s.f_frsize, socket.gethostname(), tempfile.gettempdir(), os.getpid());"
        "open('/dev/shm/mine','w').close();os.mkdir(tempfile.gettempdir()+'/d');"
        "print(sorted(n for _, n in socket.if_nameindex()))"
    )
    result = run_command([sys.executable, "-c", code],
                         Sandbox(shm_bytes=2 * MIB, hostname="vr-probe-x", timeout=20))
    result.check()
    size, host, tmp, pid = result.stdout.split("\n")[0].split()
    assert int(size) == 2 * MIB and host == "vr-probe-x" and pid == "2"
    assert "vr-ns-" in tmp
    assert result.stdout.split("\n")[1] == "['lo']"  # no route to anywhere else
    assert result.shm_left == ("mine",) and result.tmp_left == ("d/",)
    assert not os.path.exists("/dev/shm/mine")  # the host's /dev/shm is untouched
    _gone(os.path.dirname(tmp))


def test_timeout_kills_everything_and_still_lists() -> None:
    code = (
        "import os,subprocess,sys,time;open('/dev/shm/partial','w').close();"
        "subprocess.Popen([sys.executable,'-c','import signal,time;"
        "signal.signal(signal.SIGTERM,signal.SIG_IGN);time.sleep(60)'],start_new_session=True);"
        "time.sleep(60)"
    )
    ns = Namespace([sys.executable, "-c", code], Sandbox(timeout=1.5, settle=0.5))
    ns.start()
    result = ns.finish()
    assert result.timed_out and result.returncode is None
    assert result.shm_left == ("partial",)
    assert len(result.stragglers) == 2  # the target and its detached child, both killed
    assert result.lingering == ()
    assert result.elapsed < 10
    _gone(ns.work)


def test_orphans_are_settled_then_killed() -> None:
    code = "import subprocess;subprocess.Popen(['sleep','30'])"
    result = run_command([sys.executable, "-c", code], Sandbox(timeout=10, settle=0.3))
    assert result.returncode == 0 and not result.timed_out
    assert len(result.stragglers) == 1 and "sleep 30" in result.stragglers[0]
    assert result.lingering == ()


def test_host_kill_tears_the_namespace_down() -> None:
    ns = Namespace(["sleep", "60"], Sandbox(timeout=60), gated=True)
    with ns:
        pid = ns.init_pid
        assert pid is not None and ns.netns_path == f"/proc/{pid}/ns/net"
        assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    assert not os.path.exists(f"/proc/{pid}")
    _gone(ns.work)


def test_callable_value_and_raised() -> None:
    ok = run_callable(divmod, 7, 2, sandbox=Sandbox(timeout=20))
    assert ok.check() == (3, 1)
    bad = run_callable(int, "x", sandbox=Sandbox(timeout=20))
    assert bad.returncode == 1 and bad.raised is not None and "ValueError" in bad.raised


def test_setup_failure_is_reported() -> None:
    result = run_command(["true"], Sandbox(timeout=10, setup=[["false"]]))
    assert result.setup_error is not None and "exited 1" in result.setup_error
    assert result.returncode is None and result.lingering == ()


def test_a_later_namespace_is_never_taken_for_a_finished_ones_leftovers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel hands a freed namespace's id to the next one created. A namespace
    started by another test while this one's host still looks for its processes must
    not get its ids, nor have its processes counted as this one's lingering."""
    first = Namespace([sys.executable, "-c", "pass"], Sandbox(timeout=20))
    later = Namespace(["sleep", "60"], Sandbox(timeout=60), gated=True)
    later_ids: dict[str, str] = {}

    def another_starts_meanwhile(ids: Mapping[str, str], timeout: float) -> tuple[int, ...]:
        if not later_ids:
            later.start()
            pid = later.init_pid
            assert pid is not None
            later_ids.update({k: os.readlink(f"/proc/{pid}/ns/{k}") for k in ids})
            assert set(later_ids.values()).isdisjoint(ids.values()), (
                f"a live namespace got the ids {later_ids} of one still being torn down {ids}")
        return await_teardown(ids, timeout)

    monkeypatch.setattr(namespaces, "await_teardown", another_starts_meanwhile)
    try:
        first.start()
        result = first.finish()
    finally:
        first.kill()  # each cleaned up, whatever failed (a no-op once finished)
        later.kill()
    assert later_ids, "the later namespace never started"
    assert result.returncode == 0 and result.lingering == ()
    _gone(first.work)
    _gone(later.work)
