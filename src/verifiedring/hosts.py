"""Which host a process is on, and the address remote readers reach it at.

Which readers are local
    Every rank contributes :func:`host_identity` (``all_gather_object`` over
    ``pg``); a reader whose identity equals the writer's reads the shared-memory
    ring, every other reader is remote (ZeroMQ over TCP). The identity is the
    hostname plus the kernel boot id and the IPC namespace, so two containers
    that share a hostname but not ``/dev/shm`` are not mistaken for one host.
    ``VERIFIEDRING_HOST_ID`` overrides it (tests use this to put ranks of one
    machine on "different hosts"). A group on one host uses only the ring.

Which address remote readers connect to
    :func:`writer_connect_ip` on the writer, only when there are remote readers:
    ``VERIFIEDRING_CONNECT_IP`` if set, else ``VLLM_HOST_IP`` (vLLM's own
    override), else the address the hostname resolves to when it is not a
    loopback address, else ``127.0.0.1`` with a warning (remote readers on this
    machine only). It never probes the network to guess a route: on a multi-host
    group whose hostname resolves to loopback, set ``VERIFIEDRING_CONNECT_IP``.
"""

from __future__ import annotations

import logging
import os
import socket

logger = logging.getLogger("verifiedring")

HOST_ID_ENV = "VERIFIEDRING_HOST_ID"
CONNECT_IP_ENV = "VERIFIEDRING_CONNECT_IP"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def host_identity() -> str:
    """Equal for two processes exactly when they can share a /dev/shm segment."""
    override = os.environ.get(HOST_ID_ENV)
    if override:
        return override
    try:
        ipc = str(os.stat("/proc/self/ns/ipc").st_ino)
    except OSError:
        ipc = ""
    return f"{socket.gethostname()}/{_read('/proc/sys/kernel/random/boot_id')}/{ipc}"


def writer_connect_ip() -> str:
    """The address remote readers use to reach this host (see the module doc)."""
    for env in (CONNECT_IP_ENV, "VLLM_HOST_IP"):
        ip = os.environ.get(env)
        if ip:
            return ip
    try:
        ip = socket.gethostbyname(socket.gethostname())
        if not ip.startswith("127."):
            return ip
    except OSError:
        pass
    logger.warning(
        "no address for remote readers: the hostname resolves to loopback and neither %s nor "
        "VLLM_HOST_IP is set; binding 127.0.0.1, which only readers on this host can reach",
        CONNECT_IP_ENV,
    )
    return "127.0.0.1"
