"""bench/readme.py: the README's results table from the bench JSON, exactly; only the
lines between the markers change."""

from __future__ import annotations

from typing import Any

import pytest

from bench import readme

MACHINE = {"cpu": "Test CPU", "cores": 2, "kernel": "6.1", "python": "3.11.7", "load_1min": 0.25}


def _rt(transport: str, n: int, size: int, p50: float) -> dict[str, Any]:
    return {"transport": transport, "readers": n, "size": size, "p50_us": p50, "p90_us": p50 * 2}


def bench_fixture() -> dict[str, Any]:
    rt = [
        _rt("verifiedring", 1, 1024, 20.0), _rt("floor", 1, 1024, 10.0),
        _rt("vllm-0.9.0", 1, 1024, 80.0), _rt("vllm-0.33.0", 1, 1024, 100.0),
        _rt("verifiedring", 2, 1024, 30.0), _rt("floor", 2, 1024, 15.0),
        _rt("verifiedring", 3, 1024, 45.0), _rt("floor", 3, 1024, 15.0),
        _rt("vllm-0.9.0", 2, 1024, 90.0), _rt("vllm-0.9.0", 3, 1024, 120.0),
        _rt("verifiedring-remote", 1, 1024, 1500.0),
    ]
    stream = [
        {"transport": "verifiedring", "readers": 1, "msgs_per_s": 150_000.0},
        {"transport": "floor", "readers": 1, "msgs_per_s": 400_000.0},
        {"transport": "vllm-0.9.0", "readers": 1, "msgs_per_s": 40_000.0},
        {"transport": "vllm-0.33.0", "readers": 1, "msgs_per_s": 50_000.0},
    ]
    large = [
        {"transport": "verifiedring-stream", "readers": 1, "size": 2 << 20, "p50_us": 250.0,
         "gb_per_s_per_reader": 8.0},
        {"transport": "vllm-0.9.0", "readers": 1, "size": 2 << 20, "p50_us": 1000.0,
         "gb_per_s_per_reader": 2.0},
        {"transport": "verifiedring-stream", "readers": 3, "size": 64 << 20, "p50_us": 3e4,
         "gb_per_s_per_reader": 2.5},
        {"transport": "vllm-0.9.0", "readers": 3, "size": 64 << 20, "p50_us": 3e5,
         "gb_per_s_per_reader": 0.25},
    ]
    return {"machine": MACHINE, "vllm": {"vllm-0.9.0": "loaded", "vllm-0.33.0": "loaded"},
            "seed": 20, "repeats": 3, "roundtrip": rt, "stream": stream, "large": large}


PER_OP = {
    "memcpy_gb_per_s": 5.0,
    "cpu_ns_per_pair": {
        "verifiedring": {"median_ns": 1000.0, "ratio_to_pickle": 2.5},
        "vllm-0.9.0": {"median_ns": 8000.0, "ratio_to_pickle": 20.0},
        "pickle": {"median_ns": 400.0, "ratio_to_pickle": 1.0},
    },
}

IDLE = {
    "readers": 2,
    "idle_window_s": [10, 20],
    "queues": {
        "verifiedring": {"first_message_us": {"0.01": {"p50": 60.0, "p90": 90.0},
                                              "1.0": {"p50": 150.0, "p90": 200.0}},
                         "idle_cpu_percent": 0.005},
        "vllm-0.9.0": {"first_message_us": {"0.01": {"p50": 500.0, "p90": 900.0},
                                            "1.0": {"p50": 700.0, "p90": 990.0}},
                       "idle_cpu_percent": 100.0},
    },
    "c_futex_floor_us": {"0.01": {"p50": 40.0, "p90": 50.0}, "1.0": {"p50": 50.0, "p90": 60.0}},
}

EXPECTED = """\
Measured on Test CPU, 2 cores, kernel 6.1, Python 3.11.7; load 0.2 at the start; round trips and streams: medians of 3 shuffled reps (seed 20).

| what | verifiedring | vLLM 0.9 | vLLM 0.33 | floor | ratio | target |
| --- | --- | --- | --- | --- | --- | --- |
| 1 KiB round trip, 1 reader (p50) | 20.0 µs | 80.0 µs | 100 µs | 10.0 µs | 0.25x vLLM, 2.0x floor | <= 0.33x vLLM: met; <= 2.5x floor: met |
| 1 KiB streamed, 1 reader | 150k msg/s | 40k msg/s | 50k msg/s | 400k msg/s | 3.0x vLLM | >= 3x vLLM: met |
| 1 KiB round trip, 2 / 3 readers (p50) | 30.0 / 45.0 µs | 90.0 / 120 µs |  | 15.0 / 15.0 µs | 2.0x / 3.0x floor | <= 2.5x floor: short |
| CPU per enqueue + dequeue, writer and reader in one process (1 KiB) | 1.00 µs | 8.00 µs |  | pickle alone: 0.40 µs | 2.5x pickle | <= 3x pickle: met |
| first message after 10 ms / 1 s idle, 2 readers (p50) | 60.0 / 150 µs | 500 / 700 µs |  | C futex: 40.0 / 50.0 µs | 1.5x / 3.0x C futex | <= 2x C futex: short |
| idle reader CPU, 10-20 s after the last message | 0.005 % of a core | 100 % of a core |  |  |  | <= 0.01 %: met |
| 2 MiB object (bytes in a tuple) round trip, 1 MiB chunks, streamed (p50) | 250 µs | 1.00 ms |  |  | 0.25x vLLM | <= 0.09x vLLM: short |
| 64 MiB object to 3 readers, 1 MiB chunks, streamed (per reader) | 2.50 GB/s | 0.25 GB/s |  | memcpy: 5.00 GB/s | 0.50x memcpy, 10x vLLM | >= 2 GB/s per reader: met |
| remote reader (CurveZMQ over loopback), 1 KiB round trip (p50) | 1.50 ms |  |  |  |  |  |"""  # noqa: E501

DOC = """\
# Title

before the table
<!-- bench-results:start (from the JSON) -->
| old | table |
| --- | --- |
| 1 | 2 |
<!-- bench-results:end -->

after the table
"""


def test_the_table_for_a_fixture_is_exactly_this() -> None:
    assert "\n".join(readme.render(bench_fixture(), PER_OP, IDLE)) == EXPECTED


def test_rows_without_their_json_are_left_out() -> None:
    lines = readme.render(bench_fixture(), None, None)
    whats = [line.split(" | ")[0].removeprefix("| ") for line in lines[4:]]
    assert whats == [
        "1 KiB round trip, 1 reader (p50)", "1 KiB streamed, 1 reader",
        "1 KiB round trip, 2 / 3 readers (p50)",
        "2 MiB object (bytes in a tuple) round trip, 1 MiB chunks, streamed (p50)",
        "64 MiB object to 3 readers, 1 MiB chunks, streamed (per reader)",
        "remote reader (CurveZMQ over loopback), 1 KiB round trip (p50)",
    ]
    assert lines[-2].split(" | ")[4:6] == ["", "10x vLLM"]  # no memcpy floor without per_op


def test_a_missing_anchor_is_named_and_its_target_has_no_figure() -> None:
    bench = bench_fixture()
    bench["vllm"]["vllm-0.33.0"] = "not loaded: no wheel"
    bench["stream"] = [r for r in bench["stream"] if not r["transport"].startswith("vllm")]
    lines = readme.render(bench, None, None)
    assert lines[0].endswith("; not loaded: vllm-0.33.0.")
    assert lines[5] == ("| 1 KiB streamed, 1 reader | 150k msg/s |  |  | 400k msg/s |  "
                        "| >= 3x vLLM: no figure |")


def test_rewrite_changes_only_the_lines_between_the_markers() -> None:
    out = readme.rewrite(DOC, ["new line", "", "| a |"])
    assert out == DOC.replace("| old | table |\n| --- | --- |\n| 1 | 2 |\n",
                              "new line\n\n| a |\n")


def test_rewrite_refuses_a_doc_without_one_pair_of_markers() -> None:
    with pytest.raises(ValueError, match="want one"):
        readme.rewrite(DOC.replace("<!-- bench-results:end -->\n", ""), [])
