"""Exit without close() in every mode, before and after the handshake: what is left.

After the handshake the writer has removed both names, so nothing is left in any
mode. Before it, a clean exit (the script ends, ``q = None``, an exception)
removes them silently; a death without finalizers (os._exit, SIGKILL, SIGKILL
of the process group) leaves them, attributed to the dead pid, for the next
create or ``python -m verifiedring cleanup`` to remove.
"""

from __future__ import annotations

import pytest

from faults import drivers
from faults.case import run_case

CLEAN = ["return", "drop", "raise"]
DEATHS = ["os_exit", "sigkill", "killpg"]
EXIT_CODES = {"return": 0, "drop": 0, "raise": 1, "os_exit": 0, "sigkill": -9, "killpg": -9}


def _names(obs: dict[str, object]) -> tuple[str, str]:
    pid = obs["pid"]
    return f"shm:vr_{pid}_", f"tmp:vr-mq-{pid}-"


@pytest.mark.parametrize("mode", CLEAN + DEATHS)
def test_after_the_handshake_nothing_is_left(mode: str) -> None:
    obs, run = run_case(drivers.exit_without_close, mode, "after", "create")
    assert obs["got"] == "hello" and obs["ready_line"] == "ready"
    assert obs["left_before_exit"] == []  # removed at the handshake already
    assert obs["returncode"] == EXIT_CODES[mode]
    assert obs["left_after_exit"] == []
    assert run.left == ()


@pytest.mark.parametrize("mode", CLEAN)
def test_before_the_handshake_a_clean_exit_removes_both_silently(mode: str) -> None:
    obs, run = run_case(drivers.exit_without_close, mode, "before", "create")
    seg, ipc = _names(obs)
    before = obs["left_before_exit"]
    assert len(before) == 2 and before[0].startswith(seg) and before[1].startswith(ipc)
    assert obs["returncode"] == EXIT_CODES[mode]
    assert obs["left_after_exit"] == []
    stderr = obs["stderr"]
    for noise in ("Exception ignored", "leaked", "Warning", "resource_tracker"):
        assert noise not in stderr, stderr
    if mode == "raise":
        assert "RuntimeError: exiter fails" in stderr
    else:
        assert stderr == ""
    assert run.left == ()


@pytest.mark.parametrize("reaper", ["create", "cleanup"])
@pytest.mark.parametrize("mode", DEATHS)
def test_before_the_handshake_a_death_leaves_names_that_are_reaped(mode: str, reaper: str) -> None:
    obs, run = run_case(drivers.exit_without_close, mode, "before", reaper)
    seg, ipc = _names(obs)
    assert obs["returncode"] == EXIT_CODES[mode]
    left = obs["left_after_exit"]
    assert left and all(x.startswith((seg, ipc)) for x in left), left  # the dead pid's only
    assert any(x.startswith(ipc) for x in left)  # nothing else removes the ipc directory
    if mode == "killpg":  # its resource tracker died too: the segment stays
        assert any(x.startswith(seg) for x in left)
    assert obs["left_after_dry_run"] == left  # --dry-run removes nothing ...
    dry = obs["dry_run"].splitlines()
    assert len(dry) == len(left)  # ... and lists each, naming the dead creator
    assert all(f"(creator pid {obs['pid']} is not running)" in line for line in dry), dry
    if reaper == "create":
        assert obs["left_after_create"] == []  # the next create reaped them
    else:
        done = obs["cleanup"].splitlines()
        assert len(done) == len(left) and all(line.startswith("removed ") for line in done)
    assert obs["left_at_end"] == []
    assert run.left == ()


def test_a_writer_in_another_pid_namespace_is_neither_reaped_nor_taken_for_dead() -> None:
    """Before liveness was a lock, a create here judged that writer's pid (99999, which
    this namespace does not have) dead and deleted its segment and ipc directory."""
    obs, run = run_case(drivers.writer_in_another_pid_namespace)
    pid = obs["writer_pid_there"]
    assert pid == 99999 and not obs["seen_here"]
    ours = [n for n in obs["names"] if n.startswith((f"shm:vr_{pid}_", f"tmp:vr-mq-{pid}-"))]
    assert len(ours) == 2, obs["names"]
    assert set(ours) <= set(obs["after_create"]) and set(ours) <= set(obs["after_cleanup"])
    assert obs["cleanup"].strip() == "nothing stale", obs["cleanup"]
    assert obs["ready"] == "ready"
    d = obs["dequeue"]
    assert d["error"] is None and d["value"] == "from another pid namespace", d
    assert obs["returncode"] == 0
    assert run.left == ()
