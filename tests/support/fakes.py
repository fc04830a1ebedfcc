"""What tests ask of the machine that the library does not answer: a segment's presence."""

from __future__ import annotations

import os

from verifiedring.shm import SHM_DIR


def segment_exists(name: str) -> bool:
    """Whether the shared-memory segment ``name`` is still in /dev/shm."""
    return os.path.exists(os.path.join(SHM_DIR, name))
