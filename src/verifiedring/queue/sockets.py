"""ZeroMQ sockets of the message queue: endpoints, hello tags, bounded waits.

The bytes inside the frames, hellos included, are :mod:`.wire`'s; CURVE
(:mod:`.curve`) authenticates the remote frames.

Security
--------
The TCP sockets speak CurveZMQ (:mod:`.curve`): only Handle holders connect,
and every frame is encrypted and authenticated. The ipc socket lives in a
private 0700 directory. A reader's hello topic carries an HMAC-SHA256 tag
(:class:`Signer`, keyed with the queue's random key) so the writer counts only
this queue's readers at the handshake.

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

import errno
import hashlib
import hmac
import ipaddress
import os
import secrets
import shutil
import socket
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import zmq

from ..errors import BrokenPeerError, MisuseError
from ..leftovers import ipc_directory
from ..waiting import Deadline, StallLog, wait_readable
from .curve import MAX_INBOUND_BYTES, CurveKeys, ServerKeys, connect_as_reader, serve
from .wire import CONTROL_MESSAGES, LENGTH, MAX_RANK, hello_body, read_hello

#: The longest an XPUB send may block (it never should: see High-water marks).
SEND_TIMEOUT_MS = 30_000

KEY_BYTES = 32
_TAG_BYTES = 16  # a hello's tag: the first bytes of its HMAC


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


class Hello(NamedTuple):
    """Who a reader is: announced in its hello topic, named in every error about it."""

    rank: int
    pid: int
    host: str

    def __str__(self) -> str:
        rank = "without a rank" if self.rank == MAX_RANK else f"rank {self.rank}"
        return f"reader {rank} (pid {self.pid} on host {self.host})"


def hello_topic(signer: Signer, rank: int) -> bytes:
    """The topic reader ``rank`` (this process, this host) subscribes to so the writer
    knows it has joined; its unsubscription tells the writer it has left."""
    body = hello_body(rank, os.getpid(), socket.gethostname().encode())
    return body + signer.sign([body])[:_TAG_BYTES]


def parse_hello(signer: Signer, topic: bytes) -> Hello | None:
    """The reader announced by a valid hello topic, else ``None``."""
    body, tag = topic[:-_TAG_BYTES], topic[-_TAG_BYTES:]
    who = read_hello(body)
    if who is None or len(tag) != _TAG_BYTES:
        return None
    if not hmac.compare_digest(tag, signer.sign([body])[:_TAG_BYTES]):
        return None
    return Hello(*who)


def hello_events(xpub: zmq.Socket[Any], signer: Signer) -> Iterator[tuple[bool, Hello]]:
    """``(joined, hello)`` for each valid hello among the (un)subscriptions queued on
    ``xpub``: a reader joined, or left (its connection closed: it exited or died, or
    its heartbeats stopped). The catch-all subscription and forged hellos are skipped."""
    while (frames := pending_frames(xpub)) is not None:
        msg = frames[0].bytes
        if msg and msg[0] in (0, 1):
            hello = parse_hello(signer, msg[1:])
            if hello is not None:
                yield msg[0] == 1, hello


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
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_INBOUND_BYTES)  # a subscription is a hello or b""
    return sock


def _unspecified(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Binds every interface: ``0.0.0.0``, ``::``, and ``::ffff:0.0.0.0`` (the IPv4-mapped
    spelling, which ``is_unspecified`` misses before Python 3.13)."""
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_unspecified or (mapped is not None and mapped.is_unspecified)


def bind_address(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The one address ``ip`` names, to bind on; never an unspecified (wildcard) one.

    ``ip`` is an address literal or a host name; a name must resolve to
    addresses none of which is unspecified (``0``, ``0.0``, ``::0`` and the
    like all are). Raises :class:`MisuseError` naming the value and the rule.
    """
    if not isinstance(ip, str) or not ip.strip() or ip.strip() == "*":
        raise MisuseError(
            f"connect_ip={ip!r} is not an address: pass the address of this host that "
            "remote readers connect to"
        )
    try:
        infos = socket.getaddrinfo(ip.strip(), None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise MisuseError(f"connect_ip={ip!r} does not resolve: {exc}") from None
    addrs = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not addrs or any(_unspecified(a) for a in addrs):
        raise MisuseError(
            f"connect_ip={ip!r} means {sorted({str(a) for a in addrs})}: an unspecified "
            "address binds every interface; pass the address remote readers connect to"
        )
    return addrs[0]


def bind_tcp(sock: zmq.Socket[Any], ip: str) -> str:
    """Bind ``sock`` to ``ip`` (:func:`bind_address`) on a port the OS picks; return
    the bound endpoint."""
    addr = bind_address(ip)
    endpoint = f"tcp://[{addr}]:0" if addr.version == 6 else f"tcp://{addr}:0"
    if addr.version == 6:
        sock.setsockopt(zmq.IPV6, 1)
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        if exc.errno != errno.EADDRNOTAVAIL:
            raise
        raise MisuseError(
            f"connect_ip={ip!r} is not an address of this host ({socket.gethostname()}): "
            f"binding {endpoint} failed ({os.strerror(exc.errno)}); pass an address of one of its "
            "interfaces that remote readers reach"
        ) from None
    return _last_endpoint(sock)


def send_frames(sock: zmq.Socket[Any], parts: list[Any], what: str, who: str) -> None:
    """Send on an XPUB; a send blocked past SEND_TIMEOUT_MS is a broken peer.

    Every part is copied into memory libzmq owns before this returns: a zero-copy
    send would lend libzmq a Python object that pyzmq's collector thread frees at
    interpreter exit while the (never terminated) context still sends it, and the
    reader would get what the allocator wrote over it. Changing ``parts`` after the
    call cannot change what is sent either."""
    try:
        sock.send_multipart(parts, copy=True)
    except zmq.Again:
        raise BrokenPeerError(
            f"{who}: {what} could not be queued within {SEND_TIMEOUT_MS / 1000:.0f} s: a "
            "reader's pipe stayed at its high-water mark, which the protocol's window "
            "should make impossible; is a reader wedged?"
        ) from None


def welcome(xpub: zmq.Socket[Any], message: bytes) -> None:
    """Every subscriber that connects to ``xpub`` from now on gets ``message`` first
    (ZeroMQ sends it; no call of the writer is needed)."""
    xpub.setsockopt(zmq.XPUB_WELCOME_MSG, message)


def send_now(sock: Any, parts: list[Any]) -> bool:
    """Queue ``parts`` on an XPUB without waiting (copied, as :func:`send_frames`);
    false if a pipe is at its mark (nothing is queued for anyone then)."""
    try:
        sock.send_multipart(parts, zmq.NOBLOCK, copy=True)
    except zmq.Again:
        return False
    return True


def pending_frames(sock: zmq.Socket[Any]) -> list[zmq.Frame] | None:
    """The next multipart message if one is queued, else ``None`` -- never blocks (a
    poll may report a socket readable for a heartbeat command alone)."""
    try:
        return sock.recv_multipart(zmq.NOBLOCK, copy=False)
    except zmq.Again:
        return None


def recv_frames(
    sock: zmq.Socket[Any], deadline: Deadline, log: StallLog,
    on_timeout: Callable[[float], Exception], watch: Callable[[], None] | None = None,
) -> list[zmq.Frame]:
    """The next multipart message on ``sock``, waiting until ``deadline`` at most
    (logging through ``log`` while it lasts)."""
    frames = pending_frames(sock)
    if frames is not None:
        return frames
    got: list[list[zmq.Frame]] = []

    def readable(ms: int) -> bool:
        if sock.poll(ms):
            frames = pending_frames(sock)
            if frames is not None:
                got.append(frames)
                return True
        return False

    wait_readable(readable, deadline, log, on_timeout, watch)
    return got[0]


class LocalEndpoint:
    """An XPUB bound on an ipc path inside a fresh 0700 directory."""

    def __init__(self, ctx: zmq.Context[Any], hwm: int) -> None:
        # mode 0700, named with this pid, locked while this endpoint has it
        self.directory, self._lock_fd = ipc_directory()
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
        """Remove the directory (idempotent), then let go of its lock."""
        shutil.rmtree(self.directory, ignore_errors=True)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def close(self, linger_ms: int) -> None:
        """Close the socket (queued frames may flow for ``linger_ms``), remove the path."""
        self.socket.close(linger=linger_ms)
        self.remove_directory()


def _serve_tcp(
    sock: zmq.Socket[Any], ip: str, keys: ServerKeys, domain: str
) -> tuple[zmq.Socket[Any], str]:
    """Make ``sock`` a CURVE server (ZAP ``domain``) and bind it on ``ip``; closed again
    if that fails."""
    try:
        serve(sock, keys, domain)
        return sock, bind_tcp(sock, ip)
    except BaseException:
        sock.close(linger=0)
        raise


def remote_xpub(
    ctx: zmq.Context[Any], ip: str, hwm: int, keys: ServerKeys
) -> tuple[zmq.Socket[Any], str]:
    return _serve_tcp(_xpub(ctx, hwm), ip, keys, keys.domain)


def ack_pull(ctx: zmq.Context[Any], ip: str, keys: ServerKeys) -> tuple[zmq.Socket[Any], str]:
    sock: zmq.Socket[Any] = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 0)  # acks are bounded by the protocol (one per interval)
    # its own ZAP domain, never closed: a reader counted at READY may connect it later
    return _serve_tcp(sock, ip, keys, keys.ack_domain)


def subscriber(
    ctx: zmq.Context[Any], address: str, hwm: int, hello: bytes, curve: CurveKeys | None,
    events: int = 0,
) -> zmq.Socket[Any]:
    """A SUB on ``address`` receiving everything, then announcing ``hello``; a CURVE
    client of the writer when ``curve`` is given. ``events``: its monitor (pyzmq keeps
    it: ``sock.get_monitor_socket()`` returns it) reports them from before the connect,
    so none is missed (a handshake that fails at once)."""
    sock: zmq.Socket[Any] = ctx.socket(zmq.SUB)
    if events:
        sock.get_monitor_socket(events)
    sock.setsockopt(zmq.RCVHWM, hwm)
    if curve is not None:
        connect_as_reader(sock, curve)
    if address.startswith("tcp://[") and ":" in address:
        sock.setsockopt(zmq.IPV6, 1)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.setsockopt(zmq.SUBSCRIBE, hello)  # after b"": the writer sees it once b"" applies
    sock.connect(address)
    return sock


def ack_push(ctx: zmq.Context[Any], address: str, curve: CurveKeys) -> zmq.Socket[Any]:
    sock: zmq.Socket[Any] = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, 0)  # bounded by the protocol; a PUSH never drops
    connect_as_reader(sock, curve)
    if address.startswith("tcp://["):
        sock.setsockopt(zmq.IPV6, 1)
    sock.connect(address)
    return sock
