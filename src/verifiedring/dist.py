"""Deprecated alias of :mod:`verifiedring.distributed` (kept for one release).

``import verifiedring.dist`` warns (DeprecationWarning) and then behaves like
the new names: ``verifiedring.dist.X`` is ``verifiedring.distributed.X`` and
``from verifiedring.dist.paths import collect`` imports
``verifiedring.distributed.paths``, the same module object. The two modules
that moved to :mod:`verifiedring.testing` keep their old names too
(``dist.testing`` is ``testing.samples``, ``dist.launch`` is
``testing.launcher``). Like the package it stands for, importing this module
imports neither torch nor zmq: a submodule (and torch) loads on first use.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from . import distributed as _distributed

_NEW = "verifiedring.distributed"

# Submodules that left the package, by their old name.
_MOVED = {
    "testing": "verifiedring.testing.samples",
    "launch": "verifiedring.testing.launcher",
}

# Names the old package exported that now live outside verifiedring.distributed.
_MOVED_NAMES = {"run_group": "verifiedring.testing.launcher"}

__all__ = [*_distributed.__all__, *_MOVED_NAMES]
__path__: list[str] = []  # a package to the import system, so submodule imports reach the finder

# stacklevel=2: the importer's line (warnings skips importlib's own frames).
warnings.warn(
    f"verifiedring.dist is deprecated and will be removed in the next release; "
    f"import {_NEW} (and verifiedring.testing for the test tools) instead",
    DeprecationWarning,
    stacklevel=2,
)


def _target(fullname: str) -> str | None:
    """The module an old ``verifiedring.dist.<name>`` stands for, or None."""
    head, _, child = fullname.rpartition(".")
    if head != __name__:
        return None
    return _MOVED.get(child, f"{_NEW}.{child}")


class _AliasLoader(importlib.abc.Loader):
    """Hands back the module under its new name: one module object, two names."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module executed under its new name."""


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = _target(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())


def __getattr__(name: str) -> Any:
    if name in _MOVED_NAMES:
        return getattr(importlib.import_module(_MOVED_NAMES[name]), name)
    return getattr(_distributed, name)
