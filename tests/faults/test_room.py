"""The room policy, sentence by sentence, in a private small tmpfs /dev/shm.

Default ("pages"): a create reserves the ring's metadata and each chunk's first
page, and its room check asks for that plus one whole chunk; the rest is reserved
as the writer's bytes reach it, and a write that finds no room is a
SharedMemoryFullError before any store, the queue still usable. ``reserve="all"``
($VERIFIEDRING_SHM_RESERVE=all): the whole segment, checked and reserved at create.
Concurrent creates take turns, so they are exact for what they reserve.
"""

from __future__ import annotations

import pytest

from faults import room_drivers as rooms
from faults.case import run_case
from verifiedring.testing.namespaces import MIB

FULL = "SharedMemoryFullError"


@pytest.mark.parametrize("policy", ["pages", "all"])
def test_vllms_default_ring_is_refused_at_create_with_one_mib_free(policy: str) -> None:
    """vLLM's test: a 24 MiB x 10 ring with 1 MiB free is refused (a RuntimeError
    saying "Insufficient space"), under either policy, naming what the check asked
    for and what was free; nothing is left behind."""
    obs, run = run_case(rooms.vllm_default_ring, policy, shm_bytes=1 * MIB)
    if policy == "all":
        assert obs["needs"] == rooms.RingLayout(1, 24 * MIB, 10).total_bytes
    else:  # its reservation (a few pages) plus one chunk
        assert 24 * MIB < obs["needs"] < 25 * MIB, obs["needs"]
    for what in ("ring", "queue"):
        e = obs[what]
        assert FULL in e["kinds"] and "RuntimeError" in e["kinds"], e
        assert e["message"].startswith("Insufficient space in /dev/shm for the ring's segment: "
                                       f"{obs['needs']} bytes"), e
        assert f"{obs['free']} bytes free" in e["message"], e
    assert obs["left_after"] == []
    assert run.left == ()


def test_vllms_default_ring_starts_in_64_mib_under_the_default_policy_only() -> None:
    """In Docker's default 64 MiB /dev/shm the 240 MiB ring is made ("pages": the
    check asks for its reservation plus one 24 MiB chunk) and refused under "all"."""
    pages, _ = run_case(rooms.vllm_default_ring, "pages", shm_bytes=64 * MIB)
    assert pages["ring"]["error"] is None and pages["queue"]["error"] is None, pages
    whole, _ = run_case(rooms.vllm_default_ring, "all", shm_bytes=64 * MIB)
    assert whole["needs"] == rooms.RingLayout(1, 24 * MIB, 10).total_bytes
    assert whole["ring"]["message"].startswith(
        f"Insufficient space in /dev/shm for the ring's segment: {whole['needs']} bytes"
    ), whole


@pytest.mark.parametrize("tp", [2, 4])
def test_vllms_tp_layout_starts_and_carries_its_traffic_in_64_mib(tp: int) -> None:
    """vLLM's TP=2 and TP=4 layouts (the executor's 24 MiB x 10 ring, a response queue
    per worker, the group's 4 MiB x 6 broadcaster: 2 + tp rings, up to 1.5 GiB of
    segments) start in a 64 MiB /dev/shm and carry 20 steps of traffic exactly,
    holding a few MiB; closing gives every page back."""
    obs, run = run_case(rooms.vllm_layout, "pages", tp, 20, shm_bytes=64 * MIB, timeout=120.0)
    assert obs["error"] is None, obs["error"]
    assert len(obs["created"]) == 2 + tp
    assert sum(obs["created"]) > 64 * MIB * tp  # far more than the tmpfs, as segments
    assert obs["delivered"]
    held = obs["free_at_start"] - obs["free_after_traffic"]
    assert 0 < held < 8 * MIB, held
    assert obs["free_at_end"] == obs["free_at_start"]
    assert obs["left_after"] == []
    assert run.left == ()


def test_vllms_tp_layout_is_refused_at_its_first_ring_under_reserve_all() -> None:
    obs, run = run_case(rooms.vllm_layout, "all", 2, 1, shm_bytes=64 * MIB, timeout=120.0)
    e = obs["error"]
    assert e is not None and e["type"] == FULL, obs
    total = rooms.RingLayout(2, 24 * MIB, 10).total_bytes
    assert f"for the ring's segment: {total} bytes" in e["message"], e
    assert obs["created"] == []
    assert obs["left_after"] == []
    assert run.left == ()


def test_racing_creators_are_exact_for_what_the_default_policy_reserves() -> None:
    """Four creators at once of rings whose create reservation is about 4 MiB (1,024
    one-page chunks) in a 10 MiB /dev/shm, 3 rounds: each round exactly two are made,
    both carry their first message, and two are refused at create naming the bytes
    free then (less than the check asks for)."""
    obs, run = run_case(rooms.racing_creators, "pages", 4096, 1024, 4, 3, False,
                        shm_bytes=10 * MIB, timeout=180.0)
    need = obs["needs"]
    assert 2 * need < obs["free"] < 3 * need, obs
    for got in obs["rounds"]:
        made = [g for g in got if g["created"]]
        refused = [g for g in got if not g["created"]]
        assert len(made) == 2 and len(refused) == 2, got
        assert all(g["first"] for g in made), made
        for g in refused:
            message = g["create_error"]
            assert message.startswith(f"{FULL}: Insufficient space in /dev/shm for the ring's "
                                      f"segment: {need} bytes"), message
            free = int(message.split(" required, ")[1].split(" bytes free")[0])
            assert free < need, message
    assert obs["left"] == []
    assert run.left == ()


def test_racing_creators_all_start_and_the_excess_fail_a_later_write_cleanly() -> None:
    """The issue's case: four creators of 20 MiB rings (2 MiB x 10) in a 48 MiB
    /dev/shm. All four are made (each check asks for its pages plus one 2 MiB chunk)
    and all carry a first message of a whole chunk; filling their rings asks for
    80 MiB: the writes that find no room raise SharedMemoryFullError naming the
    segment and the chunk, store nothing, and each such queue carries a small
    message after it; every message that was sent arrived, in order."""
    obs, run = run_case(rooms.racing_creators, "pages", 2 * MIB, 10, 4, 1, True,
                        shm_bytes=48 * MIB, timeout=180.0)
    (got,) = obs["rounds"]
    assert all(g["created"] and g["first"] for g in got), got
    failed = [g for g in got if "fill_error" in g]
    assert failed, got
    for g in failed:
        e = g["fill_error"]
        assert e["error"] == FULL, e
        assert "no room in /dev/shm for chunk " in e["message"], e
        assert "nothing was stored" in e["message"], e
        # refused for want of room (free then, and no more since, < what it wanted): two
        # reservations in turn never split the room and both fail
        assert g["free_at_fail"] < 2 * MIB
        assert g["small_after"]["error"] is None and g["small_after"]["got"], g
    assert sum(g["held"] for g in got) <= 48 * MIB
    assert obs["left"] == []
    assert run.left == ()


def test_racing_creators_under_reserve_all_are_exact_for_whole_segments() -> None:
    """Four creators of 12 MiB rings (1 MiB x 12) under reserve="all" in a 30 MiB
    /dev/shm: exactly two are made, and they fill every chunk twice round with no
    error (all of it was reserved at create); two are refused naming what was free."""
    obs, run = run_case(rooms.racing_creators, "all", MIB, 12, 4, 2, True,
                        shm_bytes=30 * MIB, timeout=180.0)
    need = obs["needs"]
    for got in obs["rounds"]:
        made = [g for g in got if g["created"]]
        assert len(made) == 2, got
        for g in made:
            assert g["first"] and "fill_error" not in g and g["filled"] == 24, g
        for g in got:
            if not g["created"]:
                assert f"segment: {need} bytes" in g["create_error"], g
    assert obs["left"] == []
    assert run.left == ()


def test_a_queue_made_before_a_third_party_fills_shm_carries_small_messages() -> None:
    """The default policy: a queue made, then /dev/shm filled to the last byte by
    someone else. Small messages (in each chunk's first page, reserved at create)
    still go, twice round the ring; one as large as a chunk is a SharedMemoryFullError
    naming the segment and the chunk, nothing reserved or stored; once the filler is
    gone, the same call succeeds."""
    obs, run = run_case(rooms.third_party_fills, "pages", shm_bytes=8 * MIB)
    assert obs["free_filled"] == 0
    assert obs["small_errors"] == [] and obs["small_delivered"]
    e = obs["big"]
    assert e["error"] == FULL and "no room in /dev/shm for chunk " in e["message"], e
    assert "0 bytes free" in e["message"] and "nothing was stored" in e["message"], e
    assert obs["free_after_big"] == 0
    assert obs["retry"]["error"] is None and obs["big_delivered"]
    assert obs["left_after"] == []
    assert run.left == ()


def test_under_reserve_all_a_queue_made_before_shm_fills_carries_any_message() -> None:
    obs, run = run_case(rooms.third_party_fills, "all", shm_bytes=8 * MIB)
    assert obs["held_at_create"] >= 4 * MIB  # every chunk, at create
    assert obs["free_filled"] == 0
    assert obs["small_errors"] == [] and obs["small_delivered"]
    assert obs["big"]["error"] is None and obs["big_delivered"]
    assert "retry" not in obs
    assert run.left == ()
