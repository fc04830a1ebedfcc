"""A reader's per-message path: what its role does between ``dequeue``'s checks.

A reader end (:class:`~.reader.QueueReader`) keeps the calls, their checks and the
owed record's settling; it holds one path, its role's: a local reader's takes the
ring chunk of each message (:class:`~.local_path.LocalPath`), a remote reader's its
frame off the TCP socket (:class:`~.remote_path.RemotePath`). Both share what this
base holds: the end's lifecycle, outcomes and waits, the READY of the handshake and
the SHUTDOWN that closes the reader once every message is received.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmq

from ..errors import BrokenPeerError
from ..steps import READER_AWAIT_READY, READER_CLOSE, QueueObserver
from ..waiting import Deadline
from . import wire
from .lifecycle import ReaderLifecycle, ReaderState, refusal
from .outcomes import ReaderOutcomes
from .reader_waits import ReaderWaits


class ReaderPath:
    """What every reader role's path holds: the end's lifecycle, outcomes and waits
    (shared with the end, which settles what a call owes), its observer and name."""

    def __init__(self, life: ReaderLifecycle, outcomes: ReaderOutcomes, waits: ReaderWaits,
                 observer: QueueObserver | None, actor: str, who: Callable[[], str]) -> None:
        self._life = life
        self._outcomes = outcomes
        self._waits = waits
        self._observer = observer
        self._actor = actor
        self._who = who

    @property
    def socket(self) -> zmq.Socket[Any]:
        """The socket READY and SHUTDOWN arrive on."""
        raise NotImplementedError

    def take(self, deadline: Deadline, poll: bool) -> Any:
        """The next message, from IDLE (``poll``: the caller's timeout is 0)."""
        raise NotImplementedError

    def unfinished(self, deadline: Deadline, poll: bool) -> Any:
        """A dequeue from one of the role's resumable states, left so by the last one."""
        raise NotImplementedError

    def look(self) -> bool:
        """Whether the next message is at the head (nothing consumed)."""
        raise NotImplementedError

    def pay_owed(self) -> Any:
        """What an interrupt cut, paid now (:meth:`ReaderOutcomes.pay_owed`)."""
        return self._outcomes.pay_owed()

    def close(self) -> None:
        """Let go of what the path holds (sockets, the ring's watch)."""
        raise NotImplementedError

    def await_ready(self, deadline: Deadline) -> None:
        """The reader's side of the handshake: wait for the writer's READY."""
        # spec: ReaderAwaitReady -- READY must be consumed before any dequeue
        outcomes = self._outcomes
        header = outcomes.header(self._waits.recv(self.socket, deadline, "READY")[0])
        obs = self._observer
        if obs is not None:
            obs.begin(self._actor)
            obs.end(self._actor, READER_AWAIT_READY, header[1])
        if header[0] == wire.LATE:
            why = (f"it subscribed after {outcomes.writer} had sent READY to the readers "
                   "that joined in time: a reader cannot join a running queue, nor re-attach as "
                   "a rank that left it (the writer may have broken since)")
            outcomes.broken(why)
            raise BrokenPeerError(f"{self._who()}: {why}")
        if header[0] != wire.READY:
            raise BrokenPeerError(
                f"{self._who()}: expected READY as the first message, got "
                f"{wire.kind_name(header[0])} seq {header[1]}"
            )
        self._life.enter(ReaderState.IDLE)

    def _saw_shutdown(self, total: int) -> None:
        """The writer sent ``total`` messages in all: refuse once all are received."""
        life = self._life
        life.shutdown_total = total
        if life.seq >= total:
            # spec: ReaderClose -- every message received: from now on ClosedError
            life.enter(ReaderState.CLOSED, f"the writer shut the queue down after {total} messages")
            obs = self._observer
            if obs is not None:
                obs.begin(self._actor)
                obs.end(self._actor, READER_CLOSE, total)
            raise refusal(life.state, self._who(), life.why)
