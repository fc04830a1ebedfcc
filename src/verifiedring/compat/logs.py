"""verifiedring's log records, re-issued under an engine's logger at its levels.

An engine configures, and silences, the logger of the module verifiedring
replaces (vLLM's config sets ``vllm.*``; SGLang sets vLLM's ``shm_broadcast``
logger to WARNING). :func:`forward_to` makes every record of the
``verifiedring`` logger reach that logger instead: re-issued there by name, at
the engine's level for the same event (a stalled wait is INFO in vLLM, WARNING in
SGLang; other records keep theirs), and only if that logger is enabled for it.
The ``verifiedring`` logger stops propagating meanwhile, so a line is emitted
once.
"""

from __future__ import annotations

import logging

from ..waiting import STALL_MESSAGE

LIBRARY_LOGGER = "verifiedring"
__all__ = ["LIBRARY_LOGGER", "Forward", "forward_to", "stop_forwarding"]


class Forward(logging.Handler):
    """Re-issues each record under ``target``, a stalled wait at ``stall_level``."""

    def __init__(self, target: str, stall_level: int) -> None:
        super().__init__(logging.NOTSET)
        self.target = target
        self.stall_level = stall_level

    def emit(self, record: logging.LogRecord) -> None:
        level = self.stall_level if record.msg == STALL_MESSAGE else record.levelno
        logger = logging.getLogger(self.target)
        if not logger.isEnabledFor(level):
            return
        copy = logging.makeLogRecord(record.__dict__)
        copy.name = self.target
        copy.levelno = level
        copy.levelname = logging.getLevelName(level)
        logger.handle(copy)


def forward_to(target: str, stall_level: int) -> Forward:
    """Send the library's records to logger ``target`` (replacing an earlier
    forward); returns the handler. The library logger creates every record (DEBUG),
    so the engine's logger alone decides what is shown."""
    library = stop_forwarding()
    handler = Forward(target, stall_level)
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
