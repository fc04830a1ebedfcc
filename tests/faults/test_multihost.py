"""Readers on other hosts, for real: two namespace hosts (own host name, /dev/shm, IPC
and network namespaces) joined by veths through a bridge, 198.18.0.1 and 198.18.0.2
(see :mod:`verifiedring.testing.multihost`). Local vs remote, the connect address and
the host names in errors all come from the hosts themselves, with no override.
Each test checks that nothing of its hosts is left (process, link, mount, directory).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from faults import multihost_drivers as d
from faults.drivers import BOUND
from verifiedring.testing.multihost import MultiHost, unavailable_reason

ROOT = Path(__file__).resolve().parents[2]  # stress.queue's objects are imported on the hosts
A, B = "vr-host-a", "vr-host-b"
HEARTBEAT_BOUND = 5.0  # CUT_HEARTBEAT (1 s), with room for a loaded machine
Note = Callable[[str, float], None]


@pytest.fixture(scope="module", autouse=True)
def _hosts_can_be_made() -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no namespace hosts: {reason}")


def on_hosts(*calls: tuple[Callable[..., Any], tuple[Any, ...]],
             timeout: float = 60.0) -> list[Any]:
    """Run one call per host; every host's value, after checking each exited 0, in
    time, without raising or stragglers, and that nothing of the run is left."""
    mh = MultiHost(calls, timeout=timeout, env={"PYTHONPATH": str(ROOT)})
    with mh:
        results = mh.run()
    values = [r.check() for r in results]
    for r in results:
        assert r.stragglers == () and r.left == (), r.describe()
    assert mh.leftovers() == []
    return values


def _ok(readers: dict[str, Any], ranks: Sequence[int], n: int) -> list[str]:
    """The identities of ``ranks``' processes after checking each got exactly n, in order."""
    ids = []
    for r in ranks:
        got, errors, identity = readers[f"rank {r}"]
        assert errors == [] and got == n, (r, got, errors)
        ids.append(identity)
    return ids


def _queue_across_hosts(n: int, seed: int, window: int | None) -> tuple[Any, Any]:
    writer, readers = on_hosts((d.queue_writer, (n, seed, [2, 3], window)),
                               (d.queue_remote_readers, (n, seed, [2, 3])))
    return writer, readers


def test_queue_writer_on_a_two_local_readers_two_readers_on_b(measured: Note) -> None:
    n, seed = 2000, 12
    a, b = _queue_across_hosts(n, seed, window=32)
    assert a["problems"] == [] and b["problems"] == [], (a, b)
    ids_a = _ok(a["readers"], (0, 1), n)  # the ring
    ids_b = _ok(b["readers"], (2, 3), n)  # TCP, encrypted
    assert ids_a == [a["identity"]] * 2 and ids_b == [b["identity"]] * 2
    assert a["identity"].startswith(f"{A}/") and b["identity"].startswith(f"{B}/")
    assert a["subscribe"].startswith("tcp://198.18.0.1:")  # A's name resolves to it
    assert b["connect_ip"] == "198.18.0.2"
    # B's /dev/shm lacks A's segment: a local rank of the handle cannot attach there
    assert b["local_attach"]["error"] is not None and not b["local_attach"]["hung"]
    measured(f"{n} objects to 4 readers (2 per host)", a["send_seconds"])


def test_queue_across_hosts_with_the_default_window() -> None:
    """Hundreds of frames in flight when host A's writer closes and its process exits:
    close() waits until both remote readers acknowledged everything (they ack at
    SHUTDOWN). Before that, 3 of 8 loaded runs lost the frames still queued."""
    n, seed = 2000, 12
    a, b = _queue_across_hosts(n, seed, window=None)
    assert a["problems"] == [] and b["problems"] == [], (a, b)
    _ok(a["readers"], (0, 1), n)
    _ok(b["readers"], (2, 3), n)


def test_gloo_world_of_four_ranks_two_per_host_writer_rank_1() -> None:
    world, writer = 4, 1
    a, b = on_hosts((d.gloo_host, ([0, 1], world, writer)), (d.gloo_host, ([2, 3], world,
                                                                           writer)), timeout=90)
    assert a["problems"] == [] and b["problems"] == [], (a, b)
    ranks = {**a["readers"], **b["readers"]}
    by_rank = [ranks[f"rank {r}"] for r in range(world)]
    assert [x["host"] for x in by_rank] == [A, A, B, B]
    assert by_rank[0]["identity"] == by_rank[1]["identity"] != by_rank[2]["identity"]
    assert by_rank[2]["identity"] == by_rank[3]["identity"]
    assert [x["role"] for x in by_rank] == ["local", "writer", "remote", "remote"]
    assert by_rank[1]["local_ranks"] == [0]
    assert by_rank[1]["subscribe"].startswith("tcp://198.18.0.1:")
    assert len({x["checks"] for x in by_rank}) == 1 and by_rank[0]["checks"] > 0
    assert len({x["workers"] for x in by_rank}) == 1  # every rank ran the same calls


def test_writer_host_cut_off(measured: Note) -> None:
    """Host A's veth goes down: the remote reader on B and the writer both raise
    BrokenPeerError naming the other (host, pid, rank) within the heartbeat bound; the
    writer's local reader gets exactly what was sent, then the shutdown."""
    a, b = on_hosts((d.writer_cut_off, ()), (d.remote_reader_cut_off, ()))
    fill, deq = a["fill"], b["dequeue"]
    assert not fill["hung"] and fill["error"] == "BrokenPeerError", fill
    assert f"reader rank 1 (pid {b['pid']} on host {B}) is gone" in fill["message"], fill
    assert "remote socket closed" in fill["message"]
    assert a["detect_seconds"] < HEARTBEAT_BOUND, a
    assert not deq["hung"] and deq["error"] == "BrokenPeerError", deq
    assert f"the writer (pid {a['writer_pid']} on host {A}) is gone" in deq["message"], deq
    assert "heartbeat" in deq["message"]
    assert b["detect_seconds"] < HEARTBEAT_BOUND, b
    assert b["warm"] == a["sent"][:3]
    assert a["after"]["error"] == "BrokenPeerError"
    assert a["local_got"] == a["sent"], a  # the writer's local reader: every message, in order
    measured("cut -> writer raises", a["detect_seconds"])
    measured("cut -> remote reader raises", b["detect_seconds"])


@pytest.fixture(scope="module")
def killed_on_b() -> tuple[Any, Any]:
    """Host A: writer, local reader 0; host B: remote readers 1 and 2; B kills rank 2."""
    a, b = on_hosts((d.writer_remote_killed, ()), (d.remote_readers_one_killed, ()))
    return a, b


def test_remote_reader_killed_on_b(killed_on_b: tuple[Any, Any], measured: Note) -> None:
    a, b = killed_on_b
    fill = a["fill"]
    assert not fill["hung"] and fill["error"] == "BrokenPeerError", fill
    assert f"reader rank 2 (pid {a['killed_pid']} on host {B}) is gone" in fill["message"]
    assert a["detect_seconds"] < BOUND, a
    assert a["after"]["error"] == "BrokenPeerError"
    assert b["warm"] == {1: a["sent"][:3], 2: a["sent"][:3]}
    assert a["local_got"] == a["sent"], a  # the writer's local reader: every message, in order
    survivor = [x[2] for x in b["survivor"] if x[1] == "got"]
    assert survivor == a["sent"][3:]  # the other remote reader: every message, then told
    told = [x for x in b["survivor"] if x[1] == "error"]
    assert [x[2] for x in told] == ["BrokenPeerError"], b["survivor"]
    assert f"broke for good after sending {len(a['sent'])} messages" in told[0][3]
    assert f"reader rank 2 (pid {a['killed_pid']} on host {B}) is gone" in told[0][3]
    measured("kill on B -> writer on A raises", a["detect_seconds"])


def test_local_reader_is_told_the_writer_broke(killed_on_b: tuple[Any, Any]) -> None:
    """Before BROKEN, the writer's local reader waited for ever (timeout=None) while the
    writer's process lived on, past its close()."""
    a, _ = killed_on_b
    assert a["local_errors"] == ["BrokenPeerError"], a["local_errors"]
    message = a["local_error_messages"][0]
    assert f"broke for good after sending {len(a['sent'])} messages" in message
    assert f"reader rank 2 (pid {a['killed_pid']} on host {B}) is gone" in message


def test_outsider_on_b_cannot_subscribe_or_delay_the_writer(measured: Note) -> None:
    a, b = on_hosts((d.writer_with_outsider, ()), (d.outsider_host, ()))
    assert a["max_enqueue_seconds"] < 1.0, a  # never ran into its timeout
    assert b["reader_got_all"], b
    assert b["outsider_frames"] == 0
    assert a["rejected_frames"] == 0
    measured("slowest enqueue, outsider on B", a["max_enqueue_seconds"])


def test_three_hosts_through_the_bridge_each_its_own() -> None:
    values = on_hosts(*[(d.mesh_host, ()) for _ in range(3)])
    names = [f"vr-host-{c}" for c in "abc"]
    assert [v["name"] for v in values] == names
    for i, v in enumerate(values):
        others = [n for n in names if n != v["name"]]
        assert v["peers"] == {n: f"198.18.0.{names.index(n) + 1}" for n in others}
        assert v["heard"] == others
        assert v["connect_ip"] == f"198.18.0.{i + 1}"
        assert len(v["links"]) == 2 and v["links"][0] == "lo"  # lo and its veth only
        assert v["shm"] == [f"mark-{i}"]  # its own /dev/shm
        assert v["child_identity"] == v["identity"]  # one host: one identity
    assert len({v["identity"] for v in values}) == 3


@pytest.mark.parametrize("how", ["raise", "hang"])
def test_a_failing_host_is_torn_down_with_the_rest(how: str) -> None:
    mh = MultiHost([(d.failing_host, (how,)), (d.mesh_host, ())], timeout=4.0,
                   env={"PYTHONPATH": str(ROOT)})
    with mh:
        bad, other = mh.run()
    if how == "raise":
        assert bad.returncode == 1 and bad.raised and "planned failure on vr-host-a" in bad.raised
    else:
        assert bad.timed_out and bad.returncode is None
    assert bad.shm_left == ("left-behind",) and bad.stragglers  # its child, killed
    assert other.timed_out  # waited for host a to listen, killed at the bound
    assert mh.leftovers() == []


def test_a_failed_start_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import verifiedring.testing.multihost as multihost

    def broken_ip(netns: str, *args: str) -> None:
        if "veth" in args:
            raise RuntimeError("planned: no veth")
        real_ip(netns, *args)

    real_ip = multihost._ip
    monkeypatch.setattr(multihost, "_ip", broken_ip)
    mh = MultiHost([(d.mesh_host, ()), (d.mesh_host, ())], timeout=8.0)
    with pytest.raises(RuntimeError, match="planned: no veth"), mh:
        pass
    assert mh.leftovers() == []
