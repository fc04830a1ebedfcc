"""No engine installed here: fake package trees stand in for vLLM's and SGLang's."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from verifiedring.compat import vllm as shim


def installed_over_fake_engines(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """``install()`` over empty parent packages of both engines' module paths (none of
    the engine modules imported); ``uninstall()`` after."""
    for path in (shim.VLLM_MODULE, shim.SGLANG_MODULE):
        parts = path.split(".")
        for i in range(1, len(parts)):
            name = ".".join(parts[:i])
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        monkeypatch.delitem(sys.modules, path, raising=False)
    monkeypatch.delenv("VLLM_RINGBUFFER_WARNING_INTERVAL", raising=False)
    try:
        yield shim.install()
    finally:
        shim.uninstall()
