"""A reader dies, the writer breaks for good: the readers that are left are told, and why.

Before the writer sent BROKEN, the survivor of a killed local or remote reader
waited for ever with ``timeout=None``, and mid-run (``large_objects="stream"``)
past its ``timeout=5`` -- 20 s and more, past the writer's ``close()``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from faults.broken_drivers import killed_rank_reattached, reader_killed_survivor_told
from faults.case import run_case
from faults.drivers import HOST

Note = Callable[[str, float], None]

#: Seconds from the SIGKILL to the survivor's error: the writer's detection (about
#: 0.2 s), then the survivor's next look at its socket (a SLICE, 0.2 s).
TOLD_BOUND = 2.0


@pytest.mark.parametrize(
    ("channel", "flavor"), [("local", "inline"), ("remote", "inline"), ("local", "run")]
)
def test_a_reader_killed_breaks_the_writer_and_the_survivor_is_told(
    channel: str, flavor: str, measured: Note
) -> None:
    obs, run = run_case(reader_killed_survivor_told, channel, flavor)
    dead = f"reader rank 1 (pid {obs['victim']} on host {HOST}) is gone"
    assert obs["first"] == 2
    writer = obs["writer"]
    assert not writer["hung"] and writer["error"] == "BrokenPeerError", writer
    assert dead in writer["message"]
    error = obs["survivor_error"]
    assert error is not None, obs
    kind, message, waited = error[1], error[2], error[3]
    assert kind == "BrokenPeerError", error
    assert "the writer (pid " in message and "broke for good after sending" in message
    assert f"after sending {len(obs['sent'])} messages (" in message, (message, obs["sent"])
    assert dead in message and "broken since a reader left" in message
    assert obs["told_after_kill"] < TOLD_BOUND, obs
    if flavor == "run":
        assert waited < 5.0  # told mid-run, within its own timeout
        assert obs["sent"] == ["one"]  # the run never completed
    assert obs["survivor_got"] == obs["sent"], "the survivor lost or reordered messages"
    assert not obs["close"]["hung"] and obs["close"]["error"] is None, obs["close"]
    measured(f"SIGKILL -> survivor told ({channel}, {flavor})", obs["told_after_kill"])
    assert run.left == ()


@pytest.mark.parametrize("channel", ["local", "remote"])
def test_a_reader_that_reattaches_as_a_killed_rank_is_refused_at_once(channel: str) -> None:
    """Before, a remote one got the next message's frame where READY was due ("expected
    READY as the first message, got OVERFLOW seq 3"), or, the writer idle, waited for
    READY until its timeout. Now the writer's gate refuses its connection (the
    handshake is over), writer idle or not; a local one finds the ring's name removed."""
    obs, run = run_case(killed_rank_reattached, channel)
    again = obs["again"]
    assert again is not None and again[0] == "error", obs
    kind, message, seconds = again[1], again[2], again[3]
    assert kind == "BrokenPeerError", again
    if channel == "remote":
        assert message.startswith("remote reader rank 1 (pid "), message
        assert message.endswith(
            f" on host {HOST}) refused its connection: its handshake is over (READY went to "
            "the readers that joined in time): a reader cannot join a running queue, nor "
            "attach as a rank that is no reader or whose remote slot is taken"), message
    else:
        assert "does not exist" in message and "once every reader had attached" in message
    assert seconds < TOLD_BOUND, again
    assert run.left == ()
