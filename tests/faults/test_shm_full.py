"""A full /dev/shm (a private tmpfs): a MisuseError naming the sizes, never a SIGBUS."""

from __future__ import annotations

import signal

import pytest

from faults import drivers
from faults.case import run_case
from verifiedring.testing.namespaces import MIB


def test_shm_smaller_than_the_ring_is_a_misuse_error_at_create() -> None:
    obs, run = run_case(drivers.shm_full_at_create, shm_bytes=1 * MIB)
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
    its end, holds its pages; then the free-space check refuses the second at create;
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
