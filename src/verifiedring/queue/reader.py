"""What every reader end shares: identity, the expected sequence number, READY, SHUTDOWN."""

from __future__ import annotations

import os
from typing import Any

import zmq

from ..errors import BrokenPeerError, ClosedError, DecodeError, MisuseError, RingTimeoutError
from ..waiting import Deadline
from . import wire
from .curve import CurveKeys
from .handle import Handle
from .message_queue import MessageQueue
from .sockets import Signer, hello_topic, hwm_for_window, recv_frames, subscriber


class QueueReader(MessageQueue):
    """A reader end: receives every message exactly once, in the writer's order."""

    channel: str  # "local" or "remote", for messages

    def __init__(self, handle: Handle, rank: int) -> None:
        self.rank = rank
        self.n_reader = handle.n_reader
        self.local_reader_ranks = tuple(handle.local_reader_ranks)
        self.n_local_reader = len(self.local_reader_ranks)
        self.remote_window = handle.remote_window
        self._signer = Signer(handle.hmac_key)
        self._seq = 0  # the next sequence number this reader must receive
        self._shutdown_total: int | None = None  # from the writer's SHUTDOWN, once seen
        self._writer_pid = handle.writer_pid
        self._writer = f"the writer (pid {handle.writer_pid} on host {handle.writer_host})"
        self._handshaken = False
        self._open((MisuseError, "call wait_until_ready() before dequeue()"))

    def _who(self) -> str:
        return f"{self.channel} reader rank {self.rank} (pid {os.getpid()})"

    def _subscribe(
        self, address: str, window: int, curve: CurveKeys | None
    ) -> zmq.Socket[Any]:
        """A socket receiving the writer's frames on ``address``, ``window`` of them
        outstanding at most (over CURVE with ``curve``); the writer learns this
        reader's rank from it."""
        # spec: ReaderSubscribe
        return subscriber(
            self._ctx, address, hwm_for_window(window), hello_topic(self._signer, self.rank),
            curve,
        )

    def _socket(self) -> zmq.Socket[Any]:
        """The socket READY and SHUTDOWN arrive on."""
        raise NotImplementedError

    def _parse_header(self, first: zmq.Frame) -> tuple[int, int, int, int]:
        if first.buffer.nbytes != wire.HEADER_BYTES:
            raise BrokenPeerError(
                f"{self._who()}: malformed header of {first.buffer.nbytes} bytes, expected "
                f"{wire.HEADER_BYTES}"
            )
        return wire.read_header(first.buffer)

    def _recv(self, sock: zmq.Socket[Any], deadline: Deadline, what: str) -> list[zmq.Frame]:
        def describe() -> str:
            return f"{self._who()} waits for {what} from {self._writer}"

        def timed_out(waited: float) -> RingTimeoutError:
            return RingTimeoutError(f"{self._who()} timed out after {waited:.3f} s waiting for "
                                    f"{what} from {self._writer}")

        return recv_frames(sock, deadline, describe, timed_out, self.log_interval, self._watch)

    def _watch(self) -> None:
        """While this reader waits: raise :class:`BrokenPeerError` if the writer is gone."""

    def _writer_gone(self, how: str) -> BrokenPeerError:
        self._refusal = (BrokenPeerError, f"{self._writer} is gone ({how})")
        return BrokenPeerError(f"{self._who()}: {self._writer} is gone ({how})")

    def wait_until_ready(self, timeout: float | None = None) -> None:
        """Wait for the writer's READY. Idempotent once it has returned."""
        if self._closed:
            self._refuse()
        if self._handshaken:
            return
        deadline = Deadline.after(timeout)
        # spec: ReaderAwaitReady -- READY must be consumed before any dequeue
        header = self._parse_header(
            self._recv(self._socket(), deadline, "READY from the writer")[0]
        )
        if header[0] != wire.READY:
            raise BrokenPeerError(
                f"{self._who()}: expected READY as the first message, got "
                f"{wire.kind_name(header[0])} seq {header[1]}"
            )
        self._handshaken = True
        self._refusal = None
        if self._shutdown_total is not None:
            self._saw_shutdown(self._shutdown_total)

    def _saw_shutdown(self, total: int) -> None:
        """The writer sent ``total`` messages in all: refuse once all are received."""
        self._shutdown_total = total
        if self._seq >= total:
            self._refusal = (ClosedError, f"the writer shut the queue down after {total} messages")
            self._refuse()

    def _out_of_order(self, where: str, kind: int, seq: int) -> BrokenPeerError:
        return BrokenPeerError(
            f"{self._who()}: on the {where} got {wire.kind_name(kind)} seq {seq}, expected "
            f"message seq {self._seq}: a message was lost or reordered"
        )

    def _named(self, exc: DecodeError) -> DecodeError:
        exc.receiver = self._who()
        return exc
