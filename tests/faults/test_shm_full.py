"""A full /dev/shm (a private tmpfs): a MisuseError naming the sizes, never a SIGBUS."""

from __future__ import annotations

import signal

import pytest

from faults import drivers
from faults.case import run_case
from verifiedring.testing.namespaces import MIB


@pytest.mark.parametrize("policy", ["pages", "all"])
def test_shm_smaller_than_the_ring_is_a_misuse_error_at_create(policy: str) -> None:
    obs, run = run_case(drivers.shm_full_at_create, policy, shm_bytes=1 * MIB)
    for what in ("queue", "ring"):
        e = obs[what]
        assert "MisuseError" in e["kinds"], e
        assert f"{obs['needs']} bytes" in e["message"], e  # what the segment needs
        assert f"{obs['free']} bytes free" in e["message"], e  # what /dev/shm has
        assert "/dev/shm" in e["message"]
    assert obs["left_after"] == []  # nothing half-built: no segment, no ipc directory
    assert obs["round_trip"]  # a queue that fits works in the same /dev/shm
    assert run.left == ()


@pytest.mark.parametrize("bypass_check", [False, True], ids=["free-space-check", "fallocate"])
def test_two_rings_that_do_not_fit_together(bypass_check: bool) -> None:
    """Each ring (2 MiB) fits a 2.5 MiB /dev/shm, both do not. The first, filled to
    its end, holds its pages; then the free-space check (its pages and one 1 MiB
    chunk) refuses the second at create;
    ``fallocate``: with the check patched out, the second is made sparse and the page
    reservation alone refuses its first large write, before any store (the child
    would otherwise die of SIGBUS: the control shows it)."""
    obs, run = run_case(drivers.shm_full_between_rings, bypass_check, shm_bytes=5 * MIB // 2)
    assert obs["free_at_start"] > obs["needs"] > obs["free_between"]
    assert obs["first_still_whole"]  # every page of the first ring written and read
    assert obs["listed_between"] == []  # the first ring's name went at its handshake
    if not bypass_check:
        e = obs["second"]
        assert "SharedMemoryFullError" in e["kinds"] and "MisuseError" in e["kinds"], e
        assert f"{obs['needs']} bytes" in e["message"], e
        assert f"{obs['free_between']} bytes free" in e["message"], e
        assert obs["left_after_failure"] == []  # the failed segment was unlinked
    else:
        # the second ring holds its metadata and first pages only: 3 pages
        assert obs["free_between"] - obs["free_with_second"] == 3 * 4096
        e = obs["big"]
        assert "SharedMemoryFullError" in e["kinds"] and "RuntimeError" in e["kinds"], e
        assert f"segment {obs['second_name']!r}: no room in /dev/shm for chunk 0" in e["message"]
        assert f"{obs['free_with_second']} bytes free" in e["message"], e
        assert obs["free_after_big"] == obs["free_with_second"]  # nothing reserved
        assert obs["second_after"]  # the second queue still carries a small message
        assert obs["first_after"]
        assert obs["control_rc"] == -signal.SIGBUS
    assert run.returncode == 0  # exited normally: no SIGBUS
    assert run.left == ()


def test_concurrent_creates_make_exactly_the_segments_that_fit() -> None:
    """Four processes create a 12 MiB segment at once in a 30 MiB /dev/shm, 8 times:
    each time exactly two are made and two refused, naming the bytes free then (less
    than they need). Before, their reservations interleaved: pages one create had
    taken made another's fail, and both gave theirs back -- rounds where 1 or 0 were
    made, the refusal saying more bytes were free than required."""
    obs, run = run_case(drivers.concurrent_creates, 8, 4, shm_bytes=30 * MIB, timeout=120.0)
    need = drivers.RACE_SEGMENT
    assert 2 * need < obs["free"] < 3 * need, obs["free"]
    for got in obs["rounds"]:
        made = [g for g in got if g == "ok"]
        refused = [g for g in got if g != "ok"]
        assert len(made) == 2, obs["rounds"]
        for message in refused:
            assert message.startswith("SharedMemoryFullError: "), message
            assert f"a racing segment: {need} bytes" in message, message
            free = int(message.split(" required, ")[1].split(" bytes free")[0])
            assert free < need, message  # what was free when it was refused
    assert obs["left"] == []
    assert run.left == ()
