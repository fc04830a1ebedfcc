"""Dead and stopped peers, each case in its own namespaces: named fast, nothing else broken."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from faults import drivers
from faults.case import run_case
from faults.drivers import BOUND, HOST

Note = Callable[[str, float], None]


def test_a_writer_killed_before_the_handshake_is_named_to_a_waiting_remote_reader(
    measured: Note,
) -> None:
    obs, run = run_case(drivers.writer_killed_before_the_handshake)
    d = obs["ready"]
    assert not d["hung"] and d["error"] == "BrokenPeerError", d
    assert f"the writer (pid {obs['writer_pid']} on host {HOST}) is gone" in d["message"]
    assert d["seconds"] < BOUND
    measured("SIGKILL before READY -> raise", d["seconds"])
    assert run.left == ()


def test_a_remote_reader_polling_with_timeout_zero_learns_its_writer_died(
    measured: Note,
) -> None:
    obs, run = run_case(drivers.writer_killed_under_polls)
    assert obs["first"] == "first"
    e = obs.get("error")
    assert e is not None and e["error"] == "BrokenPeerError", obs["polls"][-5:]
    assert f"the writer (pid {obs['writer_pid']} on host {HOST}) is gone" in e["message"]
    assert set(obs["polls"][:-1]) <= {"RingTimeoutError"}
    assert obs["seconds"] < BOUND
    measured("SIGKILL -> a poll raises", obs["seconds"])
    assert run.left == ()


def test_a_remote_reader_paused_for_seconds_does_not_break_the_queue(measured: Note) -> None:
    """Before the heartbeat timeout was generous (1 s), the writer closed the paused
    reader's connection: the reader lost frames and the queue broke for good."""
    obs, run = run_case(drivers.remote_reader_paused)
    assert obs["paused"] >= drivers.READER_PAUSE
    assert obs["writer_errors"] == [] and obs["reader_errors"] == [], obs
    assert obs["got"] == list(range(31))
    measured("reader paused", obs["paused"])
    assert run.left == ()


@pytest.mark.parametrize("channel", ["local", "remote"])
def test_reader_sigkill_breaks_the_waiting_writer_naming_it(channel: str, measured: Note) -> None:
    obs, run = run_case(drivers.reader_killed, channel)
    fill = obs["fill"]
    dead = obs["pids"][1]
    assert not fill["hung"], obs
    assert fill["error"] == "BrokenPeerError", fill
    assert f"reader rank 1 (pid {dead} on host {HOST}) is gone" in fill["message"]
    assert f"{channel} socket closed" in fill["message"]
    assert fill["seconds"] < 2.0, fill  # "within about a second"; timeout=None
    measured("detection (kill -> raise)", obs["detect_seconds"])
    assert obs["after"]["error"] == "BrokenPeerError"
    assert "broken since a reader left" in obs["after"]["message"]
    assert obs["rank0_got"] == obs["sent"], "the live reader lost or reordered messages"
    assert obs["rank0_errors"] == []
    assert run.left == ()


def test_reader_sigstop_stalls_only_the_writer_and_names_it(measured: Note) -> None:
    obs, run = run_case(drivers.reader_stopped)
    stopped = obs["pids"][1]
    name = f"reader rank 1 (pid {stopped} on host {HOST})"
    assert obs["sent_while_stopped"] == 4  # the 4-chunk ring fills, then the writer waits
    msg = obs["timeout_message"]
    assert msg is not None and "local reader ranks [1]" in msg and name in msg, msg
    assert obs["stalled"]["error"] == "RingTimeoutError" and name in obs["stalled"]["message"]
    assert obs["others_errors"] == []
    assert obs["others_got"] == {0: obs["sent"], 2: obs["sent"]}  # ranks 0 and 2 unaffected
    assert obs["all_got"] == {r: obs["all_sent"] for r in (0, 1, 2)}  # after SIGCONT: all
    assert run.left == ()


def test_reader_sigstop_is_in_the_writers_stall_log() -> None:
    obs, _ = run_case(drivers.reader_stopped)
    name = f"reader rank 1 (pid {obs['pids'][1]} on host {HOST})"
    assert any(name in line for line in obs["stall_log"]), obs["stall_log"]


@pytest.mark.parametrize("group", [False, True], ids=["pid", "killpg"])
@pytest.mark.parametrize("channel", ["local", "remote"])
def test_writer_sigkill_is_named_to_a_reader_waiting_forever(
    channel: str, group: bool, measured: Note
) -> None:
    obs, run = run_case(drivers.writer_killed, channel, group)
    pid = obs["writer_pid"]
    d = obs["dequeue"]
    assert obs["first"] == "first"
    assert not d["hung"] and d["error"] == "BrokenPeerError", d
    assert f"the writer (pid {pid} on host {HOST}) is gone" in d["message"]
    assert d["seconds"] < 2.0, d
    measured("detection (kill -> raise)", d["seconds"])
    assert obs["again"]["error"] == "BrokenPeerError"
    assert obs["exitcode"] == -9
    if group:
        assert pid in obs["group_members"]
    assert run.left == ()  # after the handshake nothing has a name


def test_writer_death_between_overflow_marker_and_frame(measured: Note) -> None:
    obs, run = run_case(drivers.overflow_death)
    assert obs["marker_published"] and obs["exitcode"] == -9
    assert obs["pending"] == 1  # the reader took the marker and waited for its frame
    d = obs["dequeue"]
    assert not d["hung"] and d["error"] == "BrokenPeerError", d
    assert f"the writer (pid {obs['writer_pid']} on host {HOST}) is gone" in d["message"]
    assert d["seconds"] < BOUND
    measured("go -> raise (incl. the big send)", d["seconds"])
    assert obs["again"]["error"] == "BrokenPeerError"
    assert run.left == ()


def test_stopped_writer_is_named_by_heartbeats_to_a_remote_reader(measured: Note) -> None:
    obs, run = run_case(drivers.writer_stopped_remote)
    d = obs["dequeue"]
    assert not d["hung"] and d["error"] == "BrokenPeerError", d
    assert f"the writer (pid {obs['writer_pid']} on host {HOST}) is gone" in d["message"]
    assert "heartbeat" in d["message"]
    assert d["seconds"] < 5.0, d  # drivers.STOPPED_PEER_HEARTBEAT (1 s), room for load
    measured("SIGSTOP -> raise", d["seconds"])
    assert run.left == ()


@pytest.mark.parametrize("channel", ["local", "remote"])
def test_a_rank_claimed_by_two_processes_fails_the_handshake(channel: str) -> None:
    obs, run = run_case(drivers.claimed_twice, channel)
    hs = obs["handshake"]
    assert not hs["hung"] and hs["error"] == "BrokenPeerError", hs
    assert f"rank {obs['rank']} claimed twice" in hs["message"]
    for pid in obs["pids"]:
        assert f"reader rank {obs['rank']} (pid {pid} on host {HOST})" in hs["message"]
    assert run.left == ()
