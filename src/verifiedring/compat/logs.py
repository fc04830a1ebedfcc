"""verifiedring's log records, re-issued under an engine's logger at its levels.

An engine configures, and silences, the logger of the module verifiedring
replaces (vLLM's config sets ``vllm.*``; SGLang sets vLLM's ``shm_broadcast``
logger to WARNING). :func:`forward_to` makes every record of the
``verifiedring`` logger reach that logger instead: re-issued there by name, at
the engine's level for the same event (a stalled wait is INFO in vLLM, WARNING in
SGLang; other records keep theirs; vLLM's in its words, "No available shared memory
broadcast block found in N seconds"), and only if that logger is enabled for it.
The ``verifiedring`` logger stops propagating meanwhile, so a line is emitted
once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..waiting import STALL_MESSAGE

LIBRARY_LOGGER = "verifiedring"
__all__ = ["LIBRARY_LOGGER", "Forward", "StallWording", "forward_to", "stop_forwarding"]


#: How an engine words a stalled wait: the stall record's args -> its (msg, args).
StallWording = Callable[[tuple[Any, ...]], tuple[str, tuple[Any, ...]]]


class Forward(logging.Handler):
    """Re-issues each record under ``target``, a stalled wait at ``stall_level`` (and
    in the engine's words, given ``stall_wording``)."""

    def __init__(
        self, target: str, stall_level: int, stall_wording: StallWording | None = None
    ) -> None:
        super().__init__(logging.NOTSET)
        self.target = target
        self.stall_level = stall_level
        self.stall_wording = stall_wording

    def emit(self, record: logging.LogRecord) -> None:
        stall = record.msg == STALL_MESSAGE
        level = self.stall_level if stall else record.levelno
        logger = logging.getLogger(self.target)
        if not logger.isEnabledFor(level):
            return
        copy = logging.makeLogRecord(record.__dict__)
        copy.name = self.target
        copy.levelno = level
        copy.levelname = logging.getLevelName(level)
        wording = self.stall_wording
        if stall and wording is not None and isinstance(record.args, tuple):
            copy.msg, copy.args = wording(record.args)
        logger.handle(copy)


def forward_to(
    target: str, stall_level: int, stall_wording: StallWording | None = None
) -> Forward:
    """Send the library's records to logger ``target`` (replacing an earlier
    forward); returns the handler. The library logger creates every record (DEBUG),
    so the engine's logger alone decides what is shown."""
    library = stop_forwarding()
    handler = Forward(target, stall_level, stall_wording)
    library.addHandler(handler)
    library.setLevel(logging.DEBUG)
    library.propagate = False
    return handler


def stop_forwarding() -> logging.Logger:
    """Undo :func:`forward_to` (the library logger propagates at its default level
    again); returns the library logger."""
    library = logging.getLogger(LIBRARY_LOGGER)
    for old in [h for h in library.handlers if isinstance(h, Forward)]:
        library.removeHandler(old)
    library.setLevel(logging.NOTSET)
    library.propagate = True
    return library
