"""bench/readme.py: the README's results table from the bench JSON, exactly; only the
lines between the markers change."""

from __future__ import annotations

import pytest
from support.bench_json import CADENCE, IDLE, PER_OP, bench_fixture

from bench import readme

EXPECTED = """\
Measured on Test CPU, 2 cores, kernel 6.1, Python 3.11.7; load 0.2 at the start; round trips and streams: medians of 3 shuffled reps (seed 20).

| what | verifiedring | vLLM 0.9 | vLLM 0.33 | floor | ratio | target |
| --- | --- | --- | --- | --- | --- | --- |
| 1 KiB round trip, 1 reader (p50) | 20.0 µs | 80.0 µs | 100 µs | 10.0 µs | 0.25x vLLM, 2.0x floor | <= 0.33x vLLM: met; <= 2.5x floor: met |
| 1 KiB streamed, 1 reader | 150k msg/s | 40k msg/s | 50k msg/s | 400k msg/s | 3.0x vLLM | >= 3x vLLM: met |
| 1 KiB round trip, 2 / 3 readers (p50) | 30.0 / 45.0 µs | 90.0 / 120 µs |  | 15.0 / 15.0 µs | 2.0x / 3.0x floor | <= 2.5x floor: short |
| CPU per enqueue + dequeue, writer and reader in one process (1 KiB) | 1.00 µs | 8.00 µs |  | pickle alone: 0.40 µs | 2.5x pickle | <= 3x pickle: met |
| first message after 10 ms / 1 s idle, 2 readers (p50) | 60.0 / 150 µs | 500 / 700 µs |  | C futex: 40.0 / 50.0 µs | 1.5x / 3.0x C futex | <= 3x C futex: met |
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


def test_a_unit_is_written_once_only_when_every_figure_has_it() -> None:
    assert readme.joined([168.0, 412.0], readme.us, " µs") == "168 / 412 µs"
    assert readme.joined([412.0, 1340.0], readme.us, " µs") == "412 µs / 1.34 ms"
    assert readme.joined([412.0, None], readme.us, " µs") == ""


CADENCE_ROWS = [
    "| a 1 KiB step every 10 ms, 2 readers (p50 / p99, CPU per reader / writer) "
    "| 30.0 / 100 µs, CPU 2 % / 1 % | 40.0 / 200 µs, CPU 100 % / 1 % "
    "| 100 / 150 µs, CPU 99 % / 1 % | C futex: 10.0 µs; iceoryx2: 50.0 / 120 µs, CPU 0.5 % / 1 % "
    "| p50 3.0x C futex, p99 0.67x vLLM "
    "| p50 <= 3x C futex: met; p99 <= 1x vLLM: met; CPU per reader <= 3 %: met |",
    "| a 1 KiB step every 2 ms, 1 reader (p50 / p99, CPU per reader / writer) "
    "| 60.0 / 300 µs, CPU 20 % / 1 % | 50.0 / 100 µs, CPU 60 % / 1 % |  |  "
    "| p50 1.2x vLLM, p99 3.0x vLLM | p50 <= 1x vLLM: short; CPU per reader <= 15 %: short |",
]


def test_the_cadence_rows_follow_the_idle_rows_exactly() -> None:
    lines = readme.render(bench_fixture(), PER_OP, IDLE, CADENCE)
    assert lines == [*EXPECTED.split("\n")[:10], *CADENCE_ROWS, *EXPECTED.split("\n")[10:]]


def test_the_cadence_targets_are_the_issues() -> None:
    found = [t for t in readme.targets(bench_fixture(), None, None, CADENCE)
             if t.what.startswith("a 1 KiB step")]
    assert [(t.what, t.figures, t.bound, t.ok) for t in found] == [
        ("a 1 KiB step every 10 ms, 2 readers: p50 / C futex", (("", 3.0),), 3.0, True),
        ("a 1 KiB step every 10 ms, 2 readers: p99 / vLLM", (("", 100.0 / 150.0),), 1.0, True),
        ("a 1 KiB step every 10 ms, 2 readers: CPU per reader (% of a core)", (("", 2.0),),
         3.0, True),
        ("a 1 KiB step every 2 ms, 1 reader: p50 / vLLM", (("", 60.0 / 50.0),), 1.0, False),
        ("a 1 KiB step every 2 ms, 1 reader: CPU per reader (% of a core)", (("", 20.0),),
         15.0, False),
    ]
