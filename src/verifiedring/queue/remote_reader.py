"""A remote reader end: a reader on another host, every message over TCP.

It holds its per-message path (:class:`~.remote_path.RemotePath`: each message's
frame off the subscription, acknowledged back on the ack socket).
"""

from __future__ import annotations

import functools
from collections.abc import Sized

from ..steps import QueueObserver, reader_actor
from .handle import Handle, check_tag, remote_part
from .message_queue import EndParts
from .reader import QueueReader, reader_name, subscribe
from .readiness import REMOTE_POLL_WAIT_MS, remote_poll_ms
from .remote_link import MONITORED_EVENTS, RemoteLink
from .remote_path import RemotePath
from .sockets import Signer, ack_push


class RemoteReader(QueueReader):
    """A reader on another host: ``create_from_handle`` with a rank that is not local."""

    is_remote_reader = True
    channel = "remote"
    _shutdown_cancels = False  # vLLM's remote reader: shutdown() wakes nothing
    _path: RemotePath

    def __init__(self, handle: Handle, rank: int, observer: QueueObserver | None = None) -> None:
        super().__init__(handle, rank, observer)
        sub, ack, curve = remote_part(handle, rank)
        check_tag(handle, Signer(handle.hmac_key), self._who())
        sock = subscribe(self, sub, handle.remote_window, curve, MONITORED_EVENTS)
        try:
            link = RemoteLink(
                sock.get_monitor_socket(), self._life, handle,
                functools.partial(reader_name, self.channel, rank), self._outcomes.writer,
            )
            self._waits.lost = link.lost
            self._path = RemotePath(
                rank, sock, ack_push(self._ctx, ack, curve), link, handle.remote_window,
                self._life, self._outcomes, self._waits, observer, reader_actor(rank),
                self._outcomes.who,
            )
        except BaseException:
            sock.close(linger=0)
            raise
        self._closed = False

    @property
    def parts(self) -> EndParts:
        return EndParts(None, None, None, self._path.socket, None, self._path)

    def spin_until_readable(self, pending: Sized, deadline: float) -> None:
        """vLLM 0.34's short wait on a remote reader: unless ``pending`` is non-empty,
        one poll of its socket for the remote poll wait (vLLM's ``REMOTE_POLL_WAIT_MS``),
        never past ``deadline``; the caller re-checks :meth:`readable`."""
        if len(pending) == 0:
            self._path.socket.poll(timeout=remote_poll_ms(deadline, self.poll_wait_ms()))

    def poll_wait_ms(self) -> float:
        """How long one poll of :meth:`spin_until_readable` lasts at most (ms)."""
        return REMOTE_POLL_WAIT_MS

    def _release(self) -> None:
        self._path.close()
