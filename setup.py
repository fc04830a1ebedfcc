"""Build hook: ship the spec modules trace validation replays inside the package.

The modules named by ``TRACE_SPECS`` in ``src/verifiedring/testing/tlc.py`` are
copied from ``spec/`` into ``verifiedring/testing/specs/`` of the build (a wheel),
so trace validation (:mod:`verifiedring.testing.trace`) runs from an installed wheel; there is no second
copy in the tree. An editable install skips the copy: it finds them in ``spec/``.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
TLC = ROOT / "src" / "verifiedring" / "testing" / "tlc.py"


def trace_specs() -> tuple[str, ...]:
    """``TRACE_SPECS`` of the TLC driver, read from its source (the build imports nothing)."""
    for node in ast.parse(TLC.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "TRACE_SPECS" for t in node.targets
        ):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError(f"{TLC}: no TRACE_SPECS")


class BuildWithSpecs(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "verifiedring" / "testing" / "specs"
        target.mkdir(parents=True, exist_ok=True)
        for rel in trace_specs():
            shutil.copy(ROOT / "spec" / rel, target / Path(rel).name)


setup(cmdclass={"build_py": BuildWithSpecs})
