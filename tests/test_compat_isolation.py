"""Importing ``verifiedring.compat.vllm`` changes nothing for the process's other users:
no core class gains or loses an attribute, and the engine policy stays the default
(``install()`` is the one call that changes the policy)."""

from __future__ import annotations

import json
import subprocess
import sys

_SNAPSHOT = """
import json
from verifiedring import engine
from verifiedring.queue.local_reader import LocalReader
from verifiedring.queue.message_queue import MessageQueue
from verifiedring.queue.remote_reader import RemoteReader
from verifiedring.queue.writer import QueueWriter
from verifiedring.ring import ReaderCursor, ShmRingBuffer

def snapshot():
    classes = (MessageQueue, QueueWriter, LocalReader, RemoteReader, ShmRingBuffer,
               ReaderCursor)
    got = {c.__name__: sorted(dir(c)) for c in classes}
    got["policy"] = [repr(engine.engine_policy())]
    return got

before = snapshot()
import verifiedring.compat.vllm as shim
after = snapshot()
print(json.dumps([before, after, shim.MessageQueue.__mro__[1].__name__]))
"""


def test_importing_the_vllm_compat_layer_changes_no_core_class_and_no_policy() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SNAPSHOT], capture_output=True, text=True, check=True
    ).stdout
    before, after, base = json.loads(out)
    assert after == before
    assert base == "MessageQueue"  # compat's queue is a subclass of the core's
