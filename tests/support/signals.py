"""A real signal whose handler raises: an interrupt at the point CPython delivers it."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import Any

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


def signal_at_entry(code: CodeType, nth: int = 1) -> list[int]:
    """From now on, the ``nth`` call of ``code`` gets SIGUSR1 at its entry (a profile
    hook sends it as the function starts, before its first line); the list holds one
    item once it has been sent. The caller unsets the hook (``sys.setprofile(None)``)
    if the function may not be called."""
    sent: list[int] = []
    calls = [0]

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code and not sent:
            calls[0] += 1
            if calls[0] < nth:
                return
            sent.append(1)
            sys.setprofile(None)
            os.kill(os.getpid(), signal.SIGUSR1)

    sys.setprofile(hook)
    return sent


def signal_at_c_call(caller: CodeType, name: str, after: str | None = None) -> list[int]:
    """:func:`signal_at_entry` for a C call: from now on, SIGUSR1 is sent as ``caller``
    first calls the builtin or C method ``name`` (after its call of ``after``, if
    given); its handler's exception lands there (the handler runs at the hook's own
    check, before the C function runs)."""
    sent: list[int] = []
    passed = [after is None]

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "c_call" or frame.f_code is not caller or sent:
            return
        called = getattr(arg, "__name__", None)
        if called == after:
            passed[0] = True
        elif called == name and passed[0]:
            sent.append(1)
            sys.setprofile(None)
            os.kill(os.getpid(), signal.SIGUSR1)

    sys.setprofile(hook)
    return sent


def assert_interrupted(call: Any, sent: list[int]) -> None:
    """``call()`` raises :class:`Interrupt` from the signal a ``signal_at_*`` hook armed
    (``sent``, its list), which was sent exactly once; the hook is removed after."""
    try:
        with pytest.raises(Interrupt):
            call()
    finally:
        sys.setprofile(None)
    assert sent == [1], "the signal was not sent: the place was not reached"


def on_python_steps(writer: Any) -> None:
    """From now on ``writer``'s publishes take the Python steps of ``cursors.py``, whose
    windows the caller interrupts, not the native step core's one call
    (:mod:`verifiedring.native`)."""
    local = writer._local
    assert local is not None
    local._native_publish = None
