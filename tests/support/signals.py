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


class InterruptBefore:
    """A ring observer that, once armed, raises :class:`Interrupt` once, before the
    next step named ``action`` (on read flag ``reader``): an interrupt landing exactly
    there, as one delivered at the return of the call before that store would."""

    def __init__(self, action: str, reader: int | None = None) -> None:
        self.target = (action, reader)
        self.armed = False

    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        if self.armed and (action, reader) == self.target:
            self.armed = False
            raise Interrupt

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        pass
