"""Each case runs a :mod:`faults.drivers` function in its own namespaces (root only).

Where namespaces are not permitted every case here is skipped with the reason.
Measured times are gathered with ``measured`` and shown in the terminal summary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from verifiedring.testing.namespaces import unavailable_reason

_MEASURED: list[tuple[str, str, float]] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if "/faults/" in str(item.fspath):
            if reason is None:
                reason = unavailable_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"no private namespaces: {reason}"))


@pytest.fixture
def measured(request: pytest.FixtureRequest) -> Callable[[str, float], None]:
    def note(what: str, seconds: float) -> None:
        _MEASURED.append((request.node.name, what, seconds))

    return note


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _MEASURED:
        terminalreporter.section("fault cases: measured times")
        for name, what, seconds in _MEASURED:
            terminalreporter.write_line(f"{name:60s} {what:32s} {seconds:7.3f} s")
