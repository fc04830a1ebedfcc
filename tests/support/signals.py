"""A real signal whose handler raises: an interrupt at the point CPython delivers it."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from types import FrameType

import pytest


class Interrupt(BaseException):
    """What the SIGUSR1 handler raises (KeyboardInterrupt's place)."""


@pytest.fixture
def sigusr1() -> Iterator[None]:
    """While the test runs, SIGUSR1 raises :class:`Interrupt` where CPython delivers it
    (a call's return, a function's entry)."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupt

    old = signal.signal(signal.SIGUSR1, handler)
    yield
    signal.signal(signal.SIGUSR1, old)
