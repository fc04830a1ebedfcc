"""Every bad input, in one namespace: a MisuseError/BrokenPeerError naming the value, nothing
half-built left, and the queue (or the next one) still works."""

from __future__ import annotations

from typing import Any

import pytest

from faults import drivers
from faults.case import run_case


@pytest.fixture(scope="module")
def seen() -> dict[str, Any]:
    obs, run = run_case(drivers.bad_inputs, hosts=drivers.HOSTS)
    assert run.left == ()
    return dict(obs)


def _misuse(seen: dict[str, Any], label: str) -> dict[str, Any]:
    e = seen[label]
    assert "MisuseError" in e["kinds"], e
    assert e["names_value"], e
    return dict(e)


@pytest.mark.parametrize("value", drivers.BAD_RANKS, ids=repr)
def test_rank_out_of_range(seen: dict[str, Any], value: Any) -> None:
    _misuse(seen, f"rank={value!r}")


@pytest.mark.parametrize("value", drivers.BAD_CHUNK_BYTES)
@pytest.mark.parametrize("channel", ["", "remote "])
def test_max_chunk_bytes_below_header_plus_one(seen: dict[str, Any], value: int,
                                               channel: str) -> None:
    e = _misuse(seen, f"{channel}max_chunk_bytes={value!r}")
    assert "max_chunk_bytes" in e["message"]
    assert e["left"] == []


CALLS = ["writer wait_until_ready", "reader wait_until_ready", "enqueue", "local dequeue",
         "remote dequeue"]


@pytest.mark.parametrize("value", drivers.BAD_TIMEOUTS, ids=repr)
@pytest.mark.parametrize("call", CALLS)
def test_bad_timeouts(seen: dict[str, Any], call: str, value: Any) -> None:
    e = _misuse(seen, f"{call} timeout={value!r}")
    assert "timeout" in e["message"]


def test_the_queue_is_usable_after_every_bad_timeout(seen: dict[str, Any]) -> None:
    assert seen["usable after all"]  # inline and overflow, local and remote


@pytest.mark.parametrize("ip", drivers.UNSPECIFIED_IPS, ids=repr)
def test_unspecified_connect_ip(seen: dict[str, Any], ip: str) -> None:
    e = _misuse(seen, f"connect_ip={ip!r}")
    assert "connect_ip" in e["message"]
    assert e["left"] == [] and e["listeners"] == []  # nothing bound, nothing half-built


def test_a_new_queue_works_after_the_refusals(seen: dict[str, Any]) -> None:
    assert seen["new queue usable"] and seen["left_at_end"] == []


@pytest.mark.parametrize("label", ["same total size", "more chunks", "smaller chunks"])
def test_altered_handle_geometry(seen: dict[str, Any], label: str) -> None:
    e = seen[f"geometry: {label}"]
    assert e["error"] == "BrokenPeerError", e
    assert e["names_value"], e  # names the altered max_chunk_bytes and max_chunks
    if label == "same total size":
        assert e["total_bytes"][0] == e["total_bytes"][1]
    assert seen["usable after all"]  # the genuine handle attaches afterwards


def test_ipv4_mapped_unspecified_connect_ip_is_refused() -> None:
    obs, run = run_case(drivers.mapped_unspecified)
    assert run.left == ()
    assert obs["error"] == "MisuseError", obs
    assert obs["names_value"], obs
