"""The remote channel's security: CurveZMQ, with a ZAP gate that admits Handle holders.

Each queue makes, at construction, a server key pair (kept by the writer) and a
client key pair; the Handle carries the server's public key and the client pair,
so only a process that holds the Handle can complete the CURVE handshake with
the writer's two TCP sockets (the XPUB and the acknowledgement PULL). CURVE
encrypts and authenticates every frame with per-connection session keys, so an
outsider on the port can neither subscribe (and so never holds up a send), nor
read, inject or replay a frame; a reader pointed at an impostor never completes
a handshake. Keys are never logged and never in a repr.

libzmq admits every CURVE client unless a ZAP handler says otherwise; one
handler (pyzmq's :class:`zmq.auth.thread.ThreadAuthenticator`) serves the
process's context, and each writer registers its own ZAP domains (the frames'
socket's and the acknowledgements') with the one client key it admits. Once READY is
sent the frames' door closes (:meth:`_Gate.close_door`): a reader that connects after
the handshake is denied with :data:`LATE_STATUS`, which it names at once, the writer
idle or not; the acknowledgements' door stays open for the readers counted at READY.
"""

from __future__ import annotations

import os
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.auth.thread

#: Largest message a writer accepts on a TCP socket: a subscription (hello), an ack, or a
#: CURVE handshake command (INITIATE carries metadata: a few hundred bytes).
MAX_INBOUND_BYTES = 4096
#: ZeroMQ heartbeats on the TCP connections: a peer silent for its queue's heartbeat
#: timeout is disconnected (and so named by whoever waits for it). They only have to
#: catch a dead host or link: a process that dies on a live host closes its TCP
#: connections at once, and is named at once. Generous by default, so a reader paused
#: by a GC, swapping or a loaded host for seconds does not break the queue.
DEFAULT_HEARTBEAT_TIMEOUT = 10.0
#: How long a TCP connection to the writer may take to complete its CURVE handshake:
#: libzmq holds a descriptor for each connection until then (30 s by default), so an
#: outsider's idle connects could exhaust the writer process's descriptors.
HANDSHAKE_IVL_MS = 2000
#: Heartbeats per timeout: one lost or late ping does not end a connection.
HEARTBEATS_PER_TIMEOUT = 5


@dataclass(frozen=True)
class CurveKeys:
    """What a remote reader needs to connect (z85 keys); never shown in a repr."""

    server_public: bytes = field(repr=False)
    client_public: bytes = field(repr=False)
    client_secret: bytes = field(repr=False)
    #: Both ends' heartbeat timeout: a connection silent this long is closed.
    heartbeat_timeout_ms: int = int(DEFAULT_HEARTBEAT_TIMEOUT * 1000)


@dataclass(frozen=True)
class ServerKeys:
    """The writer's side: its secret key, the reader keys it admits, its ZAP domain."""

    server_secret: bytes = field(repr=False)
    reader: CurveKeys = field(repr=False)
    domain: str

    @property
    def ack_domain(self) -> str:
        """The acknowledgement socket's ZAP domain: its door stays open after READY (a
        reader subscribed in time may complete its ack connection after it)."""
        return self.domain + "/ack"


def new_keys(heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT) -> ServerKeys:
    """Fresh key pairs for one queue, whose connections time out after
    ``heartbeat_timeout`` seconds of silence."""
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    return ServerKeys(
        server_secret,
        CurveKeys(server_public, client_public, client_secret,
                  max(int(heartbeat_timeout * 1000), 1)),
        f"vr-{secrets.token_hex(8)}",
    )


class _AdmitOne:
    """A ZAP credentials provider admitting exactly one client key."""

    def __init__(self, client_public: bytes) -> None:
        self._key = client_public

    def callback(self, domain: str, key: bytes) -> bool:
        return secrets.compare_digest(key, self._key)


#: A ZAP denial's status text and code when the writer's handshake is over: libzmq hands
#: the code to the refused reader (its monitor's ``HANDSHAKE_FAILED_AUTH`` value), so it
#: tells "too late" from a wrong key (400). Not 300: libzmq closes a connection denied
#: with 300 without telling the client any code.
LATE_TEXT = b"handshake over"
LATE_STATUS = 500


class _Late:
    """A closed door: the queue's handshake is over, no connection is admitted."""

    def callback(self, domain: str, key: bytes) -> bool:
        return False


class _Authenticator(zmq.auth.thread.ThreadAuthenticator):
    """pyzmq's, denying a closed door's connections with :data:`LATE_STATUS`."""

    async def _authenticate_curve(self, domain: str, client_key: bytes) -> tuple[bool, bytes]:
        if isinstance(self.credentials_providers.get(domain), _Late):
            return False, LATE_TEXT
        return await super()._authenticate_curve(domain, client_key)

    def _send_zap_reply(self, request_id: bytes, status_code: bytes, status_text: bytes,
                        user_id: str = "anonymous") -> None:
        if status_text == LATE_TEXT:
            status_code = str(LATE_STATUS).encode()
        super()._send_zap_reply(request_id, status_code, status_text, user_id)


class _Gate:
    """The process's one ZAP handler (restarted in a forked child)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._auth: _Authenticator | None = None
        self._pid = 0

    def admit(self, ctx: zmq.Context[Any], keys: ServerKeys) -> None:
        with self._lock:
            if self._auth is None or self._pid != os.getpid():
                self._auth = _Authenticator(ctx)
                self._auth.start()
                self._pid = os.getpid()
            for domain in (keys.domain, keys.ack_domain):
                self._auth.configure_curve_callback(
                    domain, credentials_provider=_AdmitOne(keys.reader.client_public)
                )

    def close_door(self, keys: ServerKeys) -> None:
        """The queue's handshake is over: refuse every connection from now on (the ones
        made stay), each with :data:`LATE_STATUS`, which the refused reader sees at once,
        whatever the writer is doing; a plain store the ZAP thread reads."""
        with self._lock:
            if self._auth is not None and self._pid == os.getpid():
                self._auth.credentials_providers[keys.domain] = _Late()

    def revoke(self, keys: ServerKeys) -> None:
        with self._lock:
            if self._auth is not None and self._pid == os.getpid():
                self._auth.credentials_providers.pop(keys.domain, None)
                self._auth.credentials_providers.pop(keys.ack_domain, None)


GATE = _Gate()


def _heartbeats(sock: zmq.Socket[Any], timeout_ms: int) -> None:
    sock.setsockopt(zmq.HEARTBEAT_IVL, max(timeout_ms // HEARTBEATS_PER_TIMEOUT, 1))
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, timeout_ms)
    sock.setsockopt(zmq.HEARTBEAT_TTL, timeout_ms)


def serve(sock: zmq.Socket[Any], keys: ServerKeys, domain: str) -> None:
    """Make ``sock`` (before bind) a CURVE server admitting only the queue's readers
    (ZAP ``domain``: ``keys.domain``, whose door closes after READY, or ``keys.ack_domain``)."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.server_secret)
    sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_INBOUND_BYTES)
    sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_IVL_MS)
    _heartbeats(sock, keys.reader.heartbeat_timeout_ms)


def connect_as_reader(sock: zmq.Socket[Any], keys: CurveKeys) -> None:
    """Make ``sock`` (before connect) a CURVE client of the queue's writer."""
    sock.setsockopt(zmq.CURVE_SERVERKEY, keys.server_public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.client_public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.client_secret)
    _heartbeats(sock, keys.heartbeat_timeout_ms)
