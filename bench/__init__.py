"""Benchmarks: ``python -m bench [name ...]``.

Each bench is a module ``bench.<name>`` exposing ``add_arguments(parser)`` and
``main(args) -> int``; :mod:`bench.__main__` discovers and runs them. A bench
reports its figures next to a baseline measured in the same run, as a ratio;
nothing asserts on time.
"""

from __future__ import annotations

from types import ModuleType

from stress import discover_commands


def discover_benches() -> dict[str, ModuleType]:
    """The benches: public modules of this package with ``add_arguments`` and ``main``."""
    return discover_commands(__name__, list(__path__))
