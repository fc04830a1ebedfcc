"""Loaded by every interpreter of an engine run (``PYTHONPATH`` names this folder).

``VERIFIEDRING_ENGINE_QUEUE=verifiedring`` installs verifiedring's ``shm_broadcast``
(:func:`verifiedring.compat.vllm.install`) in this process before vLLM is imported;
``vllm`` leaves vLLM's own. Either way the process appends JSON lines to
``$VERIFIEDRING_ENGINE_RECORDS/<pid>.jsonl``: one per verifiedring queue end it
constructs (its class and role: the proof, from inside the process, of which queue it
used) and one at exit (its CPU seconds). A fault handler prints the stack of a
crashing thread.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import multiprocessing
import os
import resource
from collections.abc import Callable
from typing import Any

RECORDS = os.environ.get("VERIFIEDRING_ENGINE_RECORDS")


def _record(event: str, **fields: Any) -> None:
    if RECORDS is None:
        return
    fields.update(event=event, pid=os.getpid(), process=multiprocessing.current_process().name)
    with open(os.path.join(RECORDS, f"{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(fields) + "\n")


def _cpu_at_exit() -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _record("exit", cpu_s=usage.ru_utime + usage.ru_stime)


def _recorded(cls: type[Any]) -> None:
    """Make each construction of ``cls`` (or of a subclass, such as compat's vLLM-shaped
    roles) append a record once it succeeded: the core end it is, and its own class."""
    init: Callable[..., None] = cls.__init__
    end = f"{cls.__module__}.{cls.__qualname__}"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _record("queue", cls=end, built=f"{type(self).__module__}.{type(self).__qualname__}",
                writer=bool(self.is_writer))

    setattr(cls, "__init__", __init__)  # noqa: B010 -- the class is only known at run time


def _install() -> None:
    import verifiedring.compat.vllm as shim
    from verifiedring.queue.local_reader import LocalReader
    from verifiedring.queue.remote_reader import RemoteReader
    from verifiedring.queue.writer import QueueWriter

    shim.install()
    for cls in (QueueWriter, LocalReader, RemoteReader):
        _recorded(cls)


faulthandler.enable()
if RECORDS is not None:
    atexit.register(_cpu_at_exit)
    if os.environ.get("VERIFIEDRING_ENGINE_QUEUE") == "verifiedring":
        _install()
