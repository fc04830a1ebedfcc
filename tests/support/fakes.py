"""Stand-ins the tests put where a real socket or segment check would be."""

from __future__ import annotations

import os
from typing import Any

import zmq

from verifiedring.shm import SHM_DIR


def segment_exists(name: str) -> bool:
    """Whether the shared-memory segment ``name`` is still in /dev/shm."""
    return os.path.exists(os.path.join(SHM_DIR, name))


class HeldSocket:
    """Wraps the writer's local socket; while ``holding``, keeps overflow frames back."""

    def __init__(self, sock: Any, holding: bool = True) -> None:
        self.sock = sock
        self.holding = holding
        self.held: list[Any] = []

    def send_multipart(self, parts: list[Any], copy: bool = True) -> None:
        if self.holding:
            self.held.append(parts)
        else:
            self.sock.send_multipart(parts, copy=copy)

    def release(self) -> None:
        for parts in self.held:
            self.sock.send_multipart(parts)
        self.held.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class WedgedSocket(HeldSocket):
    """A socket whose sends time out, as an XPUB at its high-water mark would."""

    def send_multipart(self, parts: list[Any], copy: bool = True) -> None:
        raise zmq.Again()
