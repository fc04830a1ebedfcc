"""Wire format, ZeroMQ sockets and frame authentication of the message queue.

Wire format
-----------
Every message starts with one header (:data:`HEADER`, little endian)::

    kind     u8    INLINE (0) | FRAMED (1) | READY (2) | SHUTDOWN (3)
    seq      u64   the message's sequence number (SHUTDOWN: messages sent in all)
    nstream  u64   bytes of the pickle stream
    nbuf     u32   number of out-of-band buffers

followed, for INLINE and FRAMED, by ``nbuf`` u64 buffer lengths (:data:`LENGTH`).
Byte 0 of a ring chunk is therefore the overflow flag.

* Ring chunk, INLINE: header, lengths, stream, buffers -- all in the chunk.
* Ring chunk, FRAMED (overflow marker): the header only; the object travels on
  the local socket as the frame with the same ``seq``.
* Local socket frame: ``[header, stream, *buffers]`` (multipart).
* Remote socket frame: ``[mac, header, stream, *buffers]`` where ``mac`` is
  HMAC-SHA256 over the remaining parts (each prefixed by its length, so
  parts cannot be re-split), keyed with the queue's random key.

Sockets
-------
The writer binds an XPUB on ``ipc://<private 0700 dir>/local`` for local
readers, and, when there are remote readers, an XPUB on
``tcp://<connect_ip>:0`` plus a PULL for acknowledgements on
``tcp://<connect_ip>:0``; ports are read back from ``LAST_ENDPOINT``. Nothing is
bound on a wildcard address. Readers announce themselves by subscribing to a
rank-specific topic (:func:`hello_topic`) after subscribing to everything,
which the XPUB (``XPUB_VERBOSE``) reports to the writer.

High-water marks
----------------
A PUB socket drops a message when the pipe to a subscriber holds ``SNDHWM``
messages. The protocol bounds how many messages a reader can have outstanding
(sent but not yet received by the application): ``window``. libzmq's writer
side learns of reads in batches of ``lwm = (hwm + 1) // 2``, so it may count up
to ``lwm - 1`` already-read messages as queued. With ``hwm >= 2 * (window +
CONTROL_MESSAGES) + 1`` the pipe therefore never reaches its mark while the
protocol holds (:func:`hwm_for_window`). ``XPUB_NODROP`` is set as well, so
should the bound ever be wrong a send blocks instead of dropping silently, and
``SNDTIMEO`` bounds that block: after ``SEND_TIMEOUT_MS`` the send fails
(``zmq.Again``), which the queue reports as a broken peer.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shutil
import struct
import tempfile
from typing import Any

import zmq

from .errors import MisuseError

# --- wire format -----------------------------------------------------------

INLINE = 0
FRAMED = 1
READY = 2
SHUTDOWN = 3
#: INLINE whose out-of-band buffers the unpickler copies anyway (a top-level
#: ``bytes``/``bytearray``): the reader lends it views of the chunk instead of
#: copying them out first, so a large object costs one copy and one allocation.
INLINE_LENT = 4
KIND_NAMES = {
    INLINE: "INLINE", FRAMED: "FRAMED", READY: "READY", SHUTDOWN: "SHUTDOWN",
    INLINE_LENT: "INLINE_LENT",
}

HEADER = struct.Struct("<BQQI")
LENGTH = struct.Struct("<Q")

#: READY and SHUTDOWN: control messages that may share a pipe with the window.
CONTROL_MESSAGES = 2

#: The longest an XPUB send may block (it never should: see High-water marks).
SEND_TIMEOUT_MS = 30_000

KEY_BYTES = 32
MAC_BYTES = 32
HELLO_PREFIX = b"\xffvr-hello"
_RANK = struct.Struct("<I")


def control_header(kind: int, seq: int) -> bytes:
    return HEADER.pack(kind, seq, 0, 0)


def hwm_for_window(window: int) -> int:
    """The high-water mark that never drops a message within ``window`` (see above)."""
    return 2 * (window + CONTROL_MESSAGES) + 1


# --- authentication ---------------------------------------------------------


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


class Signer:
    """HMAC-SHA256 over the parts of a multipart message."""

    def __init__(self, key: bytes) -> None:
        self._base = hmac.new(key, digestmod=hashlib.sha256)

    def sign(self, parts: list[Any]) -> bytes:
        mac = self._base.copy()
        for part in parts:
            mac.update(LENGTH.pack(memoryview(part).nbytes))
            mac.update(part)
        return mac.digest()

    def verify(self, mac: Any, parts: list[Any]) -> bool:
        return hmac.compare_digest(bytes(mac), self.sign(parts))


def hello_topic(signer: Signer, rank: int) -> bytes:
    """The topic reader ``rank`` subscribes to so the writer knows it has joined."""
    body = HELLO_PREFIX + _RANK.pack(rank)
    return body + signer.sign([body])[:16]


def parse_hello(signer: Signer, topic: bytes) -> int | None:
    """The rank announced by a valid hello topic, else ``None``."""
    n = len(HELLO_PREFIX) + _RANK.size
    if len(topic) != n + 16 or not topic.startswith(HELLO_PREFIX):
        return None
    if not hmac.compare_digest(topic[n:], signer.sign([topic[:n]])[:16]):
        return None
    rank: int = _RANK.unpack_from(topic, len(HELLO_PREFIX))[0]
    return rank


# --- sockets ------------------------------------------------------------------


def _last_endpoint(sock: zmq.Socket[Any]) -> str:
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
    return endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)


def _xpub(ctx: zmq.Context[Any], hwm: int) -> zmq.Socket[Any]:
    sock: zmq.Socket[Any] = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.XPUB_VERBOSE, 1)
    sock.setsockopt(zmq.XPUB_NODROP, 1)
    sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, 0)  # subscription messages: bounded by reader count
    return sock


def tcp_wildcard_port(ip: str) -> str:
    if ip in ("", "*", "0.0.0.0", "::"):
        raise MisuseError(
            f"connect_ip={ip!r} would bind on every interface; pass the address remote "
            "readers connect to"
        )
    return f"tcp://[{ip}]:0" if ":" in ip else f"tcp://{ip}:0"


def bind_tcp(sock: zmq.Socket[Any], ip: str) -> str:
    """Bind ``sock`` to ``ip`` on a port the OS picks; return the bound endpoint."""
    if ":" in ip:
        sock.setsockopt(zmq.IPV6, 1)
    sock.bind(tcp_wildcard_port(ip))
    return _last_endpoint(sock)


class LocalEndpoint:
    """An XPUB bound on an ipc path inside a fresh 0700 directory."""

    def __init__(self, ctx: zmq.Context[Any], hwm: int) -> None:
        self.directory = tempfile.mkdtemp(prefix="vr-mq-")  # mode 0700
        self.path = os.path.join(self.directory, "local")
        self.socket = _xpub(ctx, hwm)
        try:
            self.socket.bind("ipc://" + self.path)
        except BaseException:
            self.socket.close(linger=0)
            self.remove_directory()
            raise
        self.address = _last_endpoint(self.socket)

    def remove_directory(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def remote_xpub(ctx: zmq.Context[Any], ip: str, hwm: int) -> tuple[zmq.Socket[Any], str]:
    sock = _xpub(ctx, hwm)
    try:
        return sock, bind_tcp(sock, ip)
    except BaseException:
        sock.close(linger=0)
        raise


def ack_pull(ctx: zmq.Context[Any], ip: str) -> tuple[zmq.Socket[Any], str]:
    sock: zmq.Socket[Any] = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 0)  # acks are bounded by the protocol (one per interval)
    try:
        return sock, bind_tcp(sock, ip)
    except BaseException:
        sock.close(linger=0)
        raise


def subscriber(ctx: zmq.Context[Any], address: str, hwm: int, hello: bytes) -> zmq.Socket[Any]:
    """A SUB on ``address`` receiving everything, then announcing ``hello``."""
    sock: zmq.Socket[Any] = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, hwm)
    if address.startswith("tcp://[") and ":" in address:
        sock.setsockopt(zmq.IPV6, 1)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.setsockopt(zmq.SUBSCRIBE, hello)  # after b"": the writer sees it once b"" applies
    sock.connect(address)
    return sock


def ack_push(ctx: zmq.Context[Any], address: str) -> zmq.Socket[Any]:
    sock: zmq.Socket[Any] = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 0)  # bounded by the protocol; a PUSH never drops
    if address.startswith("tcp://["):
        sock.setsockopt(zmq.IPV6, 1)
    sock.connect(address)
    return sock
