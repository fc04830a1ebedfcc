"""Importing ``verifiedring.compat.vllm`` changes nothing for the process's other users:
no core class gains or loses an attribute, and the engine policy stays the default
(``install()`` is the one call that changes the policy)."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time

import pytest

from verifiedring import MessageQueue
from verifiedring.compat import vllm as shim
from verifiedring.queue import RemoteReader

T = 10.0

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


def test_a_core_remote_reader_polls_for_the_cores_wait_whatever_compat_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """compat's ``REMOTE_POLL_WAIT_MS`` is its own readers' (vLLM's tests patch it): a core
    remote reader's ``spin_until_readable`` with nothing sent still polls for the core's
    1 ms, not the 10 s set on compat's module."""
    monkeypatch.setattr(shim, "REMOTE_POLL_WAIT_MS", 10_000)
    with (MessageQueue(1, 0, connect_ip="127.0.0.1") as w,
          MessageQueue.create_from_handle(w.export_handle(), 0) as r):
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        assert type(r) is RemoteReader
        t0 = time.monotonic()
        r.spin_until_readable(collections.deque(), time.monotonic() + 60)
        assert time.monotonic() - t0 < 5  # the core's 1 ms poll, far below compat's 10 s
