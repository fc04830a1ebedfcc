"""A stand-in for a local reader's ring cursor: a test overrides ``poll``."""

from __future__ import annotations

from typing import Any

from verifiedring.ring import ReaderCursor


class CursorStandIn:
    """Passes everything but what a subclass overrides to the real ``cursor``."""

    def __init__(self, cursor: ReaderCursor) -> None:
        self.cursor = cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cursor, name)
