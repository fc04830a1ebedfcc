"""Flow control for remote readers: acknowledged counts, the floor, who lags.

Remote readers have no ring to hold the writer back, so the writer keeps at
most ``window`` messages un-acknowledged per remote reader: before sending
message ``seq`` it waits until ``seq - floor < window`` (``floor``: the least
acknowledged count), or times out naming the lagging ranks. A reader acks its
received count every ``ack_interval = window // 4`` messages, so the writer
drains acks only once some reader may be within ``ack_interval`` of the
window's end. The window also gives the remote socket's high-water mark.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable
from typing import Any

import zmq

from ..errors import RingTimeoutError
from ..waiting import Deadline, StallLog, wait_readable
from .sockets import pending_frames
from .wire import read_ack

logger = logging.getLogger("verifiedring")

SETTLE_SLICE_MS = 10  # while close() settles, how often it looks for readers that left


def ack_interval(window: int) -> int:
    """How many messages a remote reader receives between two acknowledgements."""
    return max(1, window // 4)


class RemoteCredit:
    """The writer's view of its remote readers' acknowledgements."""

    def __init__(self, sock: zmq.Socket[Any], window: int) -> None:
        self._sock = sock
        self.window = window
        self._check_at = window - ack_interval(window)
        self._acked: dict[int, int] = {}
        self.floor = 0  # min over remote readers of their acknowledged count
        #: Malformed acknowledgements dropped unread.
        self.rejected = 0

    def start(self, ranks: set[int]) -> None:
        """Track ``ranks`` (the remote readers seen at the handshake), none acked yet."""
        self._acked = dict.fromkeys(sorted(ranks), 0)
        self.floor = 0

    def needs_check(self, seq: int) -> bool:
        """Whether sending ``seq`` may come near the window (then call :meth:`reserve`)."""
        return seq - self.floor >= self._check_at

    def reserve(
        self, seq: int, deadline: Deadline, who: str, log_interval: float,
        watch: Callable[[], None] | None = None,
    ) -> None:
        """Return once sending ``seq`` keeps every remote reader within the window.

        Raises :class:`RingTimeoutError` at ``deadline`` naming the lagging ranks;
        ``watch`` is called while it waits (it raises when a reader has died).
        """
        self._drain(seq)
        if seq - self.floor < self.window:
            return

        def lagging() -> str:
            return f"{who} waits for remote readers {self.lagging(seq)} (rank: acked count)"

        def timed_out(waited: float) -> RingTimeoutError:
            return RingTimeoutError(
                f"{who} could not enqueue message seq {seq} after {waited:.3f} s: remote "
                f"readers {self.lagging(seq)} are {self.window} or more messages behind "
                "(rank: acknowledged count)"
            )

        def has_room(ms: int) -> bool:
            self._sock.poll(ms)
            self._drain(seq)
            return seq - self.floor < self.window

        wait_readable(has_room, deadline, StallLog(lagging, log_interval), timed_out, watch)

    def settle(
        self, total: int, deadline: Deadline, gone: Callable[[], set[int]]
    ) -> dict[int, int]:
        """Wait until every remote reader has acknowledged all ``total`` messages (each
        acks its count when it sees SHUTDOWN) or has left (``gone()``: the ranks that
        did), at most until ``deadline``; the readers still short then (rank:
        acknowledged count), empty when none."""

        def short() -> dict[int, int]:
            self._drain(total)
            left = gone()
            return {r: c for r, c in self._acked.items() if c < total and r not in left}

        def settled(ms: int) -> bool:
            self._sock.poll(min(ms, SETTLE_SLICE_MS))  # a reader's leave is no ack: look often
            return not short()

        if short():
            with contextlib.suppress(RingTimeoutError):
                wait_readable(
                    settled, deadline, StallLog(lambda: "", math.inf),
                    lambda waited: RingTimeoutError(f"not settled after {waited:.3f} s"),
                )
        return short()

    def close(self) -> None:
        self._sock.close(linger=0)

    def lagging(self, seq: int) -> dict[int, int]:
        return {r: c for r, c in self._acked.items() if seq - c >= self.window}

    def _drain(self, seq: int) -> None:
        sock = self._sock
        acked = self._acked
        while (frames := pending_frames(sock)) is not None:
            body = frames[0].bytes if len(frames) == 1 else b""
            rank, count = read_ack(body)
            if rank not in acked or count > seq:
                self.rejected += 1
                if self.rejected in (1, 10, 100, 1000) or self.rejected % 10000 == 0:
                    logger.warning(
                        "pid %d: dropped %d malformed acknowledgement(s) so far",
                        os.getpid(), self.rejected,
                    )
                continue
            if count > acked[rank]:
                acked[rank] = count
        self.floor = min(acked.values()) if acked else seq
