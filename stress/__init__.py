"""Multiprocess soak harness: ``python -m stress <kind> [options]``.

Each kind is a module ``stress.<kind>`` exposing::

    add_arguments(parser: argparse.ArgumentParser) -> None   # its own options
    main(args: argparse.Namespace) -> int                    # 0 on success

:mod:`stress.__main__` discovers the kinds (every public module of this
package with both functions), adds the options every kind shares
(:func:`add_common_arguments`) and dispatches. A new kind is a new module;
nothing here needs editing. Importing a kind module must stay cheap (no
torch, no CUDA): import heavy dependencies inside ``main``.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from types import ModuleType


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options every kind accepts."""
    parser.add_argument("--seed", type=int, default=0, help="seed for sizes, contents, delays")
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="S",
        help="keep sending for S seconds (a soak); without it the run is bounded by a count",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON summary line on stdout at the end"
    )
    parser.add_argument(
        "--progress", type=float, default=None, metavar="S",
        help="print checked messages per second, overall and per reader, every S seconds "
        "(default: every 5 s with --duration, else never; 0: never)",
    )


def discover_commands(package: str, path: list[str]) -> dict[str, ModuleType]:
    """Public modules of ``package`` (at ``path``) with ``add_arguments`` and ``main``.

    Shared by ``python -m stress`` (kinds) and ``python -m bench`` (benches).
    """
    found = {}
    for info in sorted(pkgutil.iter_modules(path), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        if callable(getattr(module, "add_arguments", None)) and callable(
            getattr(module, "main", None)
        ):
            found[info.name] = module
    return found


def discover_kinds() -> dict[str, ModuleType]:
    """The stress kinds."""
    return discover_commands(__name__, list(__path__))
