"""Outsiders on the writer's TCP ports, in a network namespace of their own."""

from __future__ import annotations

from collections.abc import Callable

from faults import drivers
from faults.case import run_case
from verifiedring.queue.curve import HANDSHAKE_IVL_MS


def test_outsiders_cannot_subscribe_flood_replay_or_ack(
    measured: Callable[[str, float], None],
) -> None:
    """Two subscribers without the Handle's keys, raw TCP floods on both ports, byte-for-byte
    replays of a real reader's two connections, forged acks (plaintext and made-up CURVE
    keys): the writer's enqueue(timeout=1) is never delayed, nothing reaches an outsider,
    no forged or replayed ack opens the window, the real reader gets every message."""
    obs, run = run_case(drivers.outsiders)
    assert obs["max_enqueue_seconds"] < 1.0, obs  # never ran into its timeout
    measured("slowest enqueue under attack", obs["max_enqueue_seconds"])
    assert obs["outsider_frames"] == 0
    assert obs["reader_got_all"]
    for key in ("window_full", "window_still_full"):  # acks only from the real reader
        assert obs[key]["error"] == "RingTimeoutError", obs[key]
        assert "remote readers {1: 16}" in obs[key]["message"], obs[key]
    assert obs["rejected_frames"] == 0  # no outsider's ack ever reached the writer
    sub_bytes, ack_bytes = obs["replayed_bytes"]
    assert sub_bytes > 0 and ack_bytes > 0  # the replays carried a real session
    for key in ("replay_sub", "replay_ack"):
        assert obs[key]["closed"], obs[key]  # the writer dropped the replayed session
        assert obs[key]["received"] < 512, obs[key]  # a greeting at most, never a frame
    assert not obs["replay_leaked_secret"]
    assert run.left == ()


def test_idle_connections_of_an_outsider_are_dropped_within_the_handshake_interval() -> None:
    obs, run = run_case(drivers.idle_connects)
    fds = obs["fds"]
    assert obs["connected"] == 300
    assert fds["peak"] >= fds["baseline"] + 100, fds  # they did take descriptors
    assert fds["after"] <= fds["baseline"] + 10, fds
    assert obs["released_after"] < HANDSHAKE_IVL_MS / 1000 + 3.0, obs
    assert obs["got"] == "still working"
    assert run.left == ()
