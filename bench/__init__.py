"""Benchmarks: ``python -m bench [name ...]``.

Each bench is a module ``bench.<name>`` exposing ``add_arguments(parser)`` and
``main(args) -> int``; :mod:`bench.__main__` discovers and runs them. A bench
reports its figures next to a baseline measured in the same run, as a ratio;
nothing asserts on time.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def discover_benches() -> dict[str, ModuleType]:
    """Public modules of this package with ``add_arguments`` and ``main``."""
    benches = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if callable(getattr(module, "add_arguments", None)) and callable(
            getattr(module, "main", None)
        ):
            benches[info.name] = module
    return benches
