"""Outsiders on a writer's TCP ports: sockets of a process that does not hold the Handle
(plaintext, or CURVE with made-up client keys), each with a monitor that tells when the
writer refused its handshake, and raw TCP floods of junk."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

#: What a connecting socket's monitor reports when the peer refuses its handshake.
REFUSED = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
    zmq.EVENT_HANDSHAKE_FAILED_AUTH,
}
FLOOD_PAUSE = 0.01  # seconds between one flooder's rounds (paces the loop)


def tcp_address(addr: str) -> tuple[str, int]:
    """``tcp://host:port`` as ``(host, port)``."""
    host, port = addr.removeprefix("tcp://").rsplit(":", 1)
    return host, int(port)


class Outsiders:
    """Sockets and floods of one outsider; :meth:`close` (or the ``with`` block) ends all.

    ``server_public`` is the key a made-up CURVE client names as the server's (the real
    writer's, or a made-up one)."""

    def __init__(self, server_public: bytes | None = None) -> None:
        self.ctx: zmq.Context[Any] = zmq.Context()
        self.server_public = server_public or zmq.curve_keypair()[0]
        self._socks: list[zmq.Socket[Any]] = []
        self._monitors: dict[zmq.Socket[Any], zmq.Socket[Any]] = {}
        self._stop = threading.Event()
        self._floods: list[threading.Thread] = []

    def socket(self, kind: int, addr: str, *, keys: bool) -> zmq.Socket[Any]:
        """A ``kind`` socket connected to ``addr``: plaintext, or (``keys``) CURVE with a
        made-up client key pair; its monitor starts before it connects."""
        s: zmq.Socket[Any] = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        if keys:
            s.curve_serverkey = self.server_public
            s.curve_publickey, s.curve_secretkey = zmq.curve_keypair()
        if kind == zmq.SUB:
            s.setsockopt(zmq.SUBSCRIBE, b"")
        self._monitors[s] = s.get_monitor_socket()
        s.connect(addr)
        self._socks.append(s)
        return s

    def wait_refused(self, sock: zmq.Socket[Any], timeout: float) -> None:
        """Return once the peer has refused ``sock``'s handshake (its monitor says so);
        :class:`AssertionError` at once if the peer admitted it, :class:`TimeoutError` if
        neither is seen within ``timeout`` seconds."""
        monitor = self._monitors[sock]
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while (left := deadline - time.monotonic()) > 0:
            if monitor.poll(int(left * 1000) + 1):
                event = recv_monitor_message(monitor)["event"]
                if event in REFUSED:
                    return
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    raise AssertionError("the peer admitted an outsider's handshake")
                seen.append(str(zmq.Event(event).name))
        raise TimeoutError(f"no refused handshake within {timeout:g} s (saw {seen})")

    def flood(self, *addrs: str, threads: int = 2) -> None:
        """Start ``threads`` threads that connect to each of ``addrs`` over and over and
        send 64 KiB of junk, until :meth:`close`."""

        def run() -> None:
            junk = os.urandom(65536)
            while not self._stop.is_set():
                for addr in addrs:
                    with contextlib.suppress(OSError), socket.create_connection(
                        tcp_address(addr), timeout=0.5
                    ) as s:
                        s.sendall(junk)
                time.sleep(FLOOD_PAUSE)

        for _ in range(threads):
            t = threading.Thread(target=run, daemon=True)
            t.start()
            self._floods.append(t)

    def close(self) -> None:
        self._stop.set()
        for t in self._floods:
            t.join()
        for s in self._socks:
            s.disable_monitor()
            self._monitors[s].close(linger=0)
            s.close(linger=0)
        self.ctx.term()

    def __enter__(self) -> Outsiders:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
