"""verifiedring's log records, re-issued under an engine's logger at its levels.

An engine configures, and silences, the logger of the module verifiedring
replaces (vLLM's config sets ``vllm.*``; SGLang sets vLLM's ``shm_broadcast``
logger to WARNING). :func:`forward_to` makes every record of the
``verifiedring`` logger reach that logger instead: re-issued there by name, at
the engine's level for the same event (a stalled wait is INFO in vLLM, WARNING in
SGLang; other records keep theirs; vLLM's in its words, "No available shared memory
broadcast block found in N seconds"), and only if that logger is enabled for it.
It is a filter of the ``verifiedring`` logger that re-issues the record and drops
it there, so a line is emitted once: the record reaches no handler of the library
logger and does not propagate, while the logger itself keeps propagating (a log
capture that attaches its handler to every non-propagating logger, as pytest 9.2's
does, sees each record once).
"""

from __future__ import annotations

import logging

from .. import engine
from ..waiting import STALL_MESSAGE

LIBRARY_LOGGER = "verifiedring"
__all__ = ["LIBRARY_LOGGER", "Forward", "StallWording", "forward_to", "stop_forwarding"]


#: How an engine words a stalled wait: the stall record's args -> its (msg, args).
StallWording = engine.StallWording


class Forward(logging.Filter):
    """Re-issues each record under ``target``, a stalled wait at ``stall_level`` (and
    in the engine's words, given ``stall_wording``), and drops it where it was logged."""

    def __init__(
        self, target: str, stall_level: int, stall_wording: StallWording | None = None
    ) -> None:
        super().__init__()
        self.target = target
        self.stall_level = stall_level
        self.stall_wording = stall_wording

    def filter(self, record: logging.LogRecord) -> bool:
        self.emit(record)
        return False

    def emit(self, record: logging.LogRecord) -> None:
        """Log a copy of ``record`` under the target logger, if it is enabled for it."""
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
    forward); returns the filter. The library logger creates every record (DEBUG),
    so the engine's logger alone decides what is shown."""
    library = stop_forwarding()
    forward = Forward(target, stall_level, stall_wording)
    library.addFilter(forward)
    library.setLevel(logging.DEBUG)
    return forward


def stop_forwarding() -> logging.Logger:
    """Undo :func:`forward_to` (the library logger's records reach its handlers and
    propagate at its default level again); returns the library logger."""
    library = logging.getLogger(LIBRARY_LOGGER)
    for old in [f for f in library.filters if isinstance(f, Forward)]:
        library.removeFilter(old)
    library.setLevel(logging.NOTSET)
    return library
