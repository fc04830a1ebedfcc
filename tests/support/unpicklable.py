"""Objects whose pickling or unpickling raises, for the failure paths of a message."""

from __future__ import annotations

from typing import Any


class Unpicklable:
    """Raises TypeError when pickled."""

    def __reduce__(self) -> Any:
        raise TypeError("refuses to be pickled")


def _raise_on_load() -> Any:
    raise ValueError("refuses to be rebuilt")


class FailsToLoad:
    """Pickles fine; raises ValueError when unpickled."""

    def __reduce__(self) -> Any:
        return (_raise_on_load, ())
