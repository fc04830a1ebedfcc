"""``python -m faults.exiter MODE PHASE``: a writer that ends without close().

It creates ``MessageQueue(1, 1)`` (a ring segment and an ipc directory), prints
its handle (base64 pickle, one line); with PHASE ``after`` it completes the
handshake with the reader that attaches, enqueues "hello" and prints "ready".
Then it waits for a line on stdin and ends in MODE:

* ``return`` -- the script ends; the queue is still a global (collected at exit)
* ``drop`` -- ``q = None`` (collected now), then the script ends
* ``raise`` -- an uncaught exception while the queue is referenced by the frame
* ``os_exit`` -- ``os._exit(0)``: no finalizer runs
* ``sigkill`` / ``killpg`` -- the driver kills it (it just waits here)
"""

from __future__ import annotations

import base64
import os
import pickle
import sys

from verifiedring import MessageQueue

T = 20.0


def main(mode: str, phase: str) -> None:
    global q
    q = MessageQueue(1, 1, max_chunk_bytes=64 * 1024)
    print(base64.b64encode(pickle.dumps(q.export_handle())).decode(), flush=True)
    if phase == "after":
        q.wait_until_ready(T)
        q.enqueue("hello", timeout=T)
        print("ready", flush=True)
    sys.stdin.readline()
    if mode == "drop":
        q = None
    elif mode == "raise":
        local_ref = q  # held by this frame, and so by the traceback
        raise RuntimeError(f"exiter fails with {local_ref!r} open")
    elif mode == "os_exit":
        os._exit(0)
    elif mode in ("sigkill", "killpg"):
        sys.stdin.readline()  # the driver kills it here


q: MessageQueue | None = None

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
