"""Several hosts for real: namespace hosts joined by veth pairs, each running a callable.

Each host is a gated :class:`~.namespaces.Namespace` (own mount, UTS, IPC, network
and PID namespaces): its own host name, its own tmpfs ``/dev/shm`` and TMPDIR, its
own network stack with loopback and one veth, ``<link>``, whose peer sits on a
bridge in a hub namespace of its own::

    vr-host-a 198.18.0.1/24 --veth-- [hub: bridge] --veth-- vr-host-b 198.18.0.2/24
                                           |
                                          ... (one veth per host)

The addresses come from the benchmarking range 198.18.0.0/15 and exist only
inside the namespaces of the run: the veths are created from the hub's network
namespace straight into the hosts' (``ip link add ... netns``), never in the
caller's, and no address is assigned outside a host. Every host's ``/etc/hosts``
names every host, so a host name resolves to its 198.18 address (what
:func:`verifiedring.hosts.writer_connect_ip` and gloo use), and
:func:`verifiedring.hosts.host_identity` differs between hosts (host name, IPC
namespace) and agrees within one, with no override.

Each host runs ``fn(site, *args)``; :class:`Site` says which host it is, every
host's name and address, and gives an exchange directory that the hosts and the
caller see (a control channel outside the network: handles, go signals). The
host can cut itself off (:meth:`Site.cut_off`: its veth down).

:class:`MultiHost` starts everything, releases the hosts together, waits for
them (bounded), tears everything down -- on exit and on failure -- and
:meth:`MultiHost.leftovers` names anything left: a process of a namespace, a
veth or bridge of the run visible outside, a mount, the exchange directory.
:func:`unavailable_reason` says why this cannot run here (tests skip with it).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .namespaces import MIB, Namespace, NamespaceResult, Sandbox, run_command
from .namespaces import unavailable_reason as _namespaces_reason
from .ns_host import mounted_under

__all__ = ["MultiHost", "Site", "run_hosts", "unavailable_reason"]

#: The hosts' subnet: the first /24 of the benchmarking range 198.18.0.0/15.
SUBNET = "198.18.0"
PREFIX_LEN = 24
#: Bound of one ``ip`` command run from the caller.
IP_TIMEOUT = 10.0
#: Poll interval of :meth:`Site.get`.
POLL = 0.005


def host_name(index: int) -> str:
    """Host ``index``'s name: vr-host-a, vr-host-b, ..."""
    return f"vr-host-{chr(ord('a') + index)}"


@dataclass(frozen=True)
class Site:
    """What the callable of one host knows about the run."""

    index: int
    names: tuple[str, ...]
    addresses: tuple[str, ...]
    #: This host's veth (its only link besides loopback).
    link: str
    #: A directory every host and the caller see (see :meth:`put` / :meth:`get`).
    exchange: str

    @property
    def name(self) -> str:
        return self.names[self.index]

    @property
    def address(self) -> str:
        return self.addresses[self.index]

    def put(self, key: str, value: Any) -> None:
        """Publish ``value`` under ``key`` (atomically; a key is written once)."""
        path = os.path.join(self.exchange, key)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(value, f)
        os.rename(tmp, path)

    def get(self, key: str, timeout: float) -> Any:
        """The value published under ``key``, waiting at most ``timeout`` seconds."""
        path = os.path.join(self.exchange, key)
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"host {self.name}: nothing was published under {key!r} within {timeout} s"
                )
            time.sleep(POLL)
        with open(path, "rb") as f:
            return pickle.load(f)

    def cut_off(self) -> None:
        """Take this host off the network: its veth down (loopback stays up)."""
        subprocess.run(["ip", "link", "set", "dev", self.link, "down"], check=True,
                       capture_output=True, timeout=IP_TIMEOUT)


Call = tuple[Callable[..., Any], tuple[Any, ...]]


class MultiHost:
    """``len(calls)`` namespace hosts; host ``i`` runs ``calls[i][0](site, *calls[i][1])``.

    ``timeout`` bounds each host's callable (then everything in it is killed); ``env``
    is added to the hosts' environment (a ``PYTHONPATH`` is joined to this process's
    ``sys.path``, which the hosts get anyway). Use as
    a context manager: :meth:`run` returns the hosts' results in order; leaving the
    block tears down whatever is still up.
    """

    def __init__(self, calls: Sequence[Call], *, timeout: float = 60.0,
                 shm_bytes: int = 64 * MIB, tmp_bytes: int = 16 * MIB,
                 settle: float = 3.0, env: Mapping[str, str] | None = None) -> None:
        if not 1 <= len(calls) <= 26:
            raise ValueError(f"1..26 hosts, got {len(calls)}")
        self.calls = list(calls)
        self.timeout = timeout
        self._sizes = (shm_bytes, tmp_bytes, settle)
        self._env = dict(env or {})
        token = secrets.token_hex(2)
        n = len(calls)
        #: Names of every link the run creates (hosts' veths, their hub peers, the bridge).
        self.links = [f"vr{token}h{i}" for i in range(n)]
        self.bridge = f"vr{token}br"
        self.names = tuple(host_name(i) for i in range(n))
        self.addresses = tuple(f"{SUBNET}.{i + 1}" for i in range(n))
        self.exchange = ""
        self.hosts: list[Namespace] = []
        self.hub: Namespace | None = None
        self._lingering: list[int] = []
        self._results: list[NamespaceResult] | None = None

    def sites(self) -> list[Site]:
        return [Site(i, self.names, self.addresses, self.links[i], self.exchange)
                for i in range(len(self.calls))]

    def start(self) -> MultiHost:
        """Start the hub and the hosts, wire the network, then release the hosts."""
        self.exchange = tempfile.mkdtemp(prefix="vr-mh-", dir="/tmp")
        sites = self.sites()
        self.hub = Namespace(
            ["sleep", str(int(2 * self.timeout + 60))],
            Sandbox(shm_bytes=MIB, tmp_bytes=MIB, hostname="vr-hub",
                    timeout=2 * self.timeout + 60, settle=0.1),
        ).start()
        directory = dict(zip(self.names, self.addresses, strict=True))
        for site, (fn, args) in zip(sites, self.calls, strict=True):
            setup = [
                ["ip", "addr", "add", f"{site.address}/{PREFIX_LEN}", "dev", site.link],
                ["ip", "link", "set", "dev", site.link, "up"],
            ]
            shm, tmp, settle = self._sizes
            sandbox = Sandbox(hostname=site.name, hosts=directory, setup=setup, shm_bytes=shm,
                              tmp_bytes=tmp, settle=settle, timeout=self.timeout, env=self._env)
            self.hosts.append(Namespace.calling(fn, site, *args, sandbox=sandbox, gated=True))
        for host in self.hosts:
            host.start()
        hub = _netns(self.hub, "the hub")
        _ip(hub, "link", "add", self.bridge, "type", "bridge")
        _ip(hub, "link", "set", "dev", self.bridge, "up")
        for i, host in enumerate(self.hosts):
            link = self.links[i]
            _ip(hub, "link", "add", f"{link}p", "type", "veth", "peer", "name", link,
                "netns", _netns(host, self.names[i]))
            _ip(hub, "link", "set", "dev", f"{link}p", "master", self.bridge, "up")
        for host in self.hosts:
            host.release()
        return self

    def run(self) -> list[NamespaceResult]:
        """Start (unless started), wait for every host to end (bounded), tear down."""
        if not self.hosts:
            self.start()
        if self._results is None:
            bound = 2 * self.timeout + 30.0
            start = time.monotonic()
            self._results = [h.finish(max(bound - (time.monotonic() - start), 1.0))
                             for h in self.hosts]
            self._lingering.extend(p for r in self._results for p in r.lingering)
            self._teardown()
        return self._results

    def _teardown(self) -> None:
        for host in self.hosts:
            self._lingering.extend(host.kill())
        if self.hub is not None:
            self._lingering.extend(self.hub.kill())
        if self.exchange and not mounted_under(self.exchange):
            shutil.rmtree(self.exchange, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """Anything of the run still there after :meth:`run` or the ``with`` block."""
        left = [f"process {pid} of a namespace" for pid in self._lingering]
        mine = {*self.links, *(f"{x}p" for x in self.links), self.bridge}
        shown = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                               timeout=IP_TIMEOUT, check=True).stdout
        for line in shown.splitlines():
            name = line.split(":", 2)[1].strip().split("@")[0]
            if name in mine:
                left.append(f"link {name} in the caller's network namespace")
        for ns in [*self.hosts, *([self.hub] if self.hub else [])]:
            left.extend(f"mount {m}" for m in mounted_under(ns.work))
            if os.path.exists(ns.work):
                left.append(f"work directory {ns.work}")
        if self.exchange and os.path.exists(self.exchange):
            left.append(f"exchange directory {self.exchange}")
        return left

    def __enter__(self) -> MultiHost:
        try:
            return self.start()
        except BaseException:
            self._teardown()
            raise

    def __exit__(self, *exc: object) -> None:
        self._teardown()


def run_hosts(calls: Sequence[Call], **kwargs: Any) -> tuple[list[NamespaceResult], list[str]]:
    """Run ``calls`` on namespace hosts (see :class:`MultiHost`): the hosts' results
    and what was left afterwards (empty unless the teardown failed)."""
    mh = MultiHost(calls, **kwargs)
    with mh:
        results = mh.run()
    return results, mh.leftovers()


def _netns(ns: Namespace, what: str) -> str:
    path = ns.netns_path
    if path is None:
        raise RuntimeError(f"{what}: its namespace did not start")
    with contextlib.suppress(OSError):
        if os.readlink(path) != os.readlink("/proc/self/ns/net"):
            return path
    raise RuntimeError(f"{what}: {path} is not a network namespace of its own")


def _ip(netns: str, *args: str) -> None:
    """``ip ARGS`` in the network namespace ``netns`` (a ``/proc/<pid>/ns/net``)."""
    done = subprocess.run(["nsenter", f"--net={netns}", "ip", *args], capture_output=True,
                          text=True, timeout=IP_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} in {netns} exited {done.returncode}: "
                           f"{done.stderr.strip()}")


_probe: list[str | None] = []


def unavailable_reason() -> str | None:
    """Why namespace hosts cannot be made here (``None``: they can). Probed once."""
    if not _probe:
        _probe.append(_probe_once())
    return _probe[0]


def _probe_once() -> str | None:
    reason = _namespaces_reason()
    if reason:
        return reason
    for tool in ("ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    result = run_command(["true"], Sandbox(shm_bytes=MIB, tmp_bytes=MIB, timeout=20, settle=0.1,
                                           setup=[["ip", "link", "add", "vrprobe0", "type", "veth",
                                                   "peer", "name", "vrprobe1"],
                                                  ["ip", "link", "add", "vrprobebr", "type",
                                                   "bridge"]]))
    if result.returncode != 0 or result.setup_error:
        return f"veth pairs or bridges cannot be made in a namespace: {result.describe()}"
    return None
