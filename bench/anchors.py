"""anchors: vLLM's own shm_broadcast MessageQueue, loaded from its wheels at bench time.

Nothing of vLLM is kept in this repository. For each anchor version
(:data:`VERSIONS`) the bench downloads the wheel once into a cache directory
(``$VERIFIEDRING_BENCH_CACHE``, else ``~/.cache/verifiedring-bench``) with
``pip download --no-deps``, extracts its Python files (no compiled extensions),
and imports ``vllm.distributed.device_communicators.shm_broadcast`` unmodified
from that tree. The package ``__init__`` chain would pull vLLM's heavy
dependencies, so the modules on the import path that the hot path does not use
are replaced by stand-ins written into the cache at extraction (:data:`STAND_INS`).
The hot path -- ``enqueue``/``dequeue``,
``acquire_write``/``acquire_read``, the spin and its sleep, ``vllm.envs``,
``vllm.distributed.utils.sched_yield`` -- is vLLM's own code.

``load(name)`` is meant for a bench's child process: one version per process,
since both versions are the package ``vllm``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

VERSIONS = {"vllm-0.9.0": "0.9.0", "vllm-0.33.0": "0.33.0"}
MODULE = "vllm.distributed.device_communicators.shm_broadcast"
_LOGGER = """import logging


class _Logger(logging.LoggerAdapter):
    def info_once(self, msg, *args, **kwargs):
        self.info(msg, *args)

    def warning_once(self, msg, *args, **kwargs):
        self.warning(msg, *args)

    def debug_once(self, msg, *args, **kwargs):
        self.debug(msg, *args)


def init_logger(name):
    return _Logger(logging.getLogger(name), {})
"""
_SETUP = """import contextlib
import ipaddress
import socket
import tempfile
import uuid


def get_ip():
    return "127.0.0.1"


def get_open_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_open_zmq_ipc_path():
    return f"ipc://{tempfile.gettempdir()}/{uuid.uuid4()}"


def get_open_zmq_inproc_path():
    return f"inproc://{uuid.uuid4()}"


def is_valid_ipv6_address(address):
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return True


def get_tcp_uri(ip, port):
    return f"tcp://[{ip}]:{port}" if is_valid_ipv6_address(ip) else f"tcp://{ip}:{port}"


def is_torch_equal_or_newer(target):
    return True


def check_cgroup_memory_available(required_bytes, allocation_name):
    return None


suppress_stdout = contextlib.nullcontext
"""
# Stand-ins for the modules on the import path that the hot path does not use: the
# package initialisers (empty), the logger (a plain logging adapter: vLLM's pulls its
# formatters), the setup helpers (addresses, ports, the cgroup check), and
# ``vllm.platforms`` (``current_platform`` serves create_from_process_group only).
# None: only where the wheel has that file (the layout differs between versions).
STAND_INS: dict[str, str | None] = {
    "vllm/__init__.py": "",
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/device_communicators/__init__.py": "",
    "vllm/platforms/__init__.py": "current_platform = None\n",
    "vllm/logger.py": _LOGGER,
    "vllm/utils.py": None,
    "vllm/utils/__init__.py": None,
    "vllm/utils/network_utils.py": None,
    "vllm/utils/cpu_resource_utils.py": None,
    "vllm/utils/system_utils.py": None,
}


def cache_dir() -> Path:
    env = os.environ.get("VERIFIEDRING_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "verifiedring-bench"


def _wheel(version: str, cache: Path) -> Path:
    wheels = cache / "wheels"
    found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                        f"vllm=={version}", "-d", str(wheels)],
                       check=True, capture_output=True, timeout=900)
        found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    if not found:
        raise FileNotFoundError(f"pip download gave no wheel of vllm=={version}")
    return found[0]


def tree(name: str, cache: Path | None = None) -> Path:
    """The extracted Python tree of ``name`` (downloaded and extracted if absent)."""
    cache = cache or cache_dir()
    version = VERSIONS[name]
    root = cache / "trees" / name
    done = root / ".extracted"
    if done.exists():
        return root
    with zipfile.ZipFile(_wheel(version, cache)) as z:
        for member in z.namelist():
            if member.startswith("vllm/") and member.endswith(".py"):
                z.extract(member, root)
        names = set(z.namelist())
    for rel, text in STAND_INS.items():
        if text is None:
            if rel not in names:
                continue
            text = "" if rel.endswith("__init__.py") else _SETUP
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    done.write_text(version + "\n")
    return root


def load(name: str, cache: Path | None = None) -> Any:
    """vLLM ``name``'s MessageQueue class; raises (with the reason) if it cannot load."""
    import importlib

    root = str(tree(name, cache))
    loaded = sys.modules.get(MODULE)
    if loaded is not None:
        if not str(getattr(loaded, "__file__", "")).startswith(root):
            raise RuntimeError(f"another vLLM is loaded in this process: {loaded.__file__}")
        return loaded.MessageQueue
    sys.path.insert(0, root)
    return importlib.import_module(MODULE).MessageQueue


def status(cache: Path | None = None, names: Iterable[str] = VERSIONS) -> dict[str, str]:
    """For the JSON: the state of each anchor of ``names`` (default all), ``loaded`` or
    why not (each in a fresh process)."""
    out = {}
    for name in names:
        code = f"from bench.anchors import load; load({name!r})"
        try:
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                           text=True, timeout=1200, cwd=Path(__file__).resolve().parent.parent)
            out[name] = "loaded"
        except subprocess.CalledProcessError as e:
            out[name] = "not loaded: " + (e.stderr.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            out[name] = "not loaded: download or import timed out"
    return out
