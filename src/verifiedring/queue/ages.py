"""How long a stalled reader has gone without a message: its stall line's last clause
(the writer's says how long ago the chunk a reader has not read was published:
:attr:`~verifiedring.cursor_base.WriterSide.published_at`)."""

from __future__ import annotations

import time


def took(at: float) -> str:
    """A reader's stall clause: how long ago it last took a message (``at``, monotonic
    seconds when its last message was there for it to take; 0: none yet)."""
    if not at:
        return "; it has taken no message yet"
    return f"; it last took a message {time.monotonic() - at:.1f} s ago"
