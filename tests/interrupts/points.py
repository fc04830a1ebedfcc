"""The profile hook: where an asynchronous exception can land, and raising one there.

CPython 3.11 runs a pending signal's handler at a function's entry (RESUME) and at
the return of a call (the check after CALL); a handler's exception surfaces there.
A profile hook sees both: ``call`` (the entry) and ``c_return`` (a C call's return).
A point is a site and its occurrence: the same site reached again in the phase is
another point. A hook that raises is unset by CPython, so one interrupt is raised
per arming. A second one inside the first's handling (``again``) comes from a trace
function, which CPython keeps apart from the profile one: set just before the first
raise, it raises at the ``again``-th entry of a library function after it.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import verifiedring

_PKG = os.path.dirname(verifiedring.__file__) + os.sep

#: A site: (file under the package, line, what is entered or returned from, event).
Site = tuple[str, int, str, str]
#: A point: a site and its occurrence (1 = the first time the phase reaches it).
Point = tuple[Site, int]


def _ours(frame: FrameType | None) -> bool:
    return frame is not None and frame.f_code.co_filename.startswith(_PKG)


def _where(frame: FrameType) -> tuple[str, int]:
    return frame.f_code.co_filename[len(_PKG):], frame.f_lineno


def site_of(frame: FrameType, event: str, arg: Any) -> Site | None:
    """The site of a profile event, or ``None`` if no exception lands there for us: a
    function's entry, of the library's or called by it; a C call's return in the
    library's code."""
    if event == "call" and (_ours(frame) or _ours(frame.f_back)):
        code = frame.f_code
        caller = frame.f_back
        where = _where(caller) if _ours(caller) and caller is not None else _where(frame)
        return (*where, code.co_qualname, "entry")
    if event == "c_return" and _ours(frame):
        name = getattr(arg, "__qualname__", None) or type(arg).__name__
        return (*_where(frame), str(name), "return")
    return None


@dataclass
class Hook:
    """Counts every point of an armed phase (``target`` None) or raises
    KeyboardInterrupt at ``target``; ``hit`` says whether it was raised."""

    target: Point | None = None
    seen: list[Point] = field(default_factory=list)
    hit: bool = False
    #: The hook of the cut end's next call (a second interrupt there), if any.
    second: Hook | None = None
    #: > 0: a second interrupt at that library function entry after the first (in the
    #: first one's handling); ``hit_again`` says whether it was raised.
    again: int = 0
    hit_again: bool = False
    _counts: Counter[Site] = field(default_factory=Counter)
    _entries: int = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        site = site_of(frame, event, arg)
        if site is None:
            return
        self._counts[site] += 1
        point = (site, self._counts[site])
        if self.target is None:
            self.seen.append(point)
        elif point == self.target:
            self.hit = True
            if self.again:
                sys.settrace(self._during_handling)
            raise KeyboardInterrupt(f"at {point}")

    def _during_handling(self, frame: FrameType, event: str, arg: Any) -> None:
        """The trace function after the first raise: counts the library's function
        entries and raises at the ``again``-th (then it is unset by CPython)."""
        if event != "call" or site_of(frame, event, arg) is None:
            return
        self._entries += 1
        if self._entries == self.again:
            self.hit_again = True
            raise KeyboardInterrupt(f"again, at entry {self._entries} after the first")

    @contextmanager
    def armed(self) -> Iterator[None]:
        """The phase the hook watches (this thread only: signals land in the main one)."""
        if self.hit:
            yield
            return
        sys.setprofile(self)
        try:
            yield
        finally:
            sys.setprofile(None)
            sys.settrace(None)


def describe(point: Point) -> str:
    (path, line, name, event), k = point
    nth = "" if k == 1 else f" #{k}"
    return f"{path}:{line} {event} {name}{nth}"
