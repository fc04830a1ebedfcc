"""teardown: how long a writer's close() takes with one remote reader, by its state.

One writer (this process, loopback TCP) and one remote reader in a spawned process,
per scenario and repeat:

* ``idle``: the reader took all ``--messages`` and is in no ``dequeue`` until the
  writer has closed (vLLM's readers stop dequeuing once shut down);
* ``died``: the reader took 3 of them, then was killed (SIGKILL) before close();
* ``short`` (the bound still applies): the reader is alive and takes nothing until
  the writer has closed; close() waits its linger (``--linger``, short here) for it,
  then warns.

Printed: the median and the largest close() time per scenario, and each as a share of
the linger it ran with (the default linger is 5 s; vLLM's close takes no wait at all,
its sockets close with linger 0). Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import statistics
import time
from typing import Any

from verifiedring import ClosedError, MessageQueue
from verifiedring.queue.transmitters import DEFAULT_LINGER
from verifiedring.testing.launcher import Supervisor, Task, channel, raise_for

LOOPBACK = "127.0.0.1"
WAIT = 30.0  # seconds: the most any one step may take
DIE_AFTER = 3
SCENARIOS = ("idle", "died", "short")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=10, help="messages sent per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per scenario")
    parser.add_argument("--linger", type=float, default=0.5, help="linger of 'short' (s)")


def _reader(handle: Any, take: int, scenario: str) -> str:
    """The remote reader's process: take ``take`` messages, tell the parent, then die
    (``died``) or wait until the parent says the writer closed, and read the end."""
    r = MessageQueue.create_from_handle(handle, 1)
    r.wait_until_ready(WAIT)
    got = [r.dequeue(WAIT) for _ in range(take)]
    line = channel()
    line.send(len(got))
    if scenario == "died":
        line.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    line.recv(WAIT)  # in no dequeue until the writer has closed
    try:
        while True:
            r.dequeue(WAIT)
    except ClosedError:
        return "closed"
    finally:
        r.close()


def _one(scenario: str, messages: int, linger: float) -> float:
    """One run: the seconds close() took."""
    take = {"idle": messages, "died": DIE_AFTER, "short": 0}[scenario]
    w = MessageQueue(1, 0, connect_ip=LOOPBACK, linger=linger)
    try:
        task = Task(_reader, (w.export_handle(), take, scenario), name="reader")
        with Supervisor([task]) as procs:
            w.wait_until_ready(WAIT)
            for i in range(messages):
                w.enqueue(i, timeout=WAIT)
            assert procs.channel("reader").recv(WAIT) == take
            if scenario == "died":
                procs.wait(WAIT)  # the process is gone before close()
            t0 = time.monotonic()
            w.close()
            took = time.monotonic() - t0
            procs.channel("reader").send("closed")
            outcomes = procs.wait(WAIT)
            if scenario != "died":
                raise_for(outcomes, f"teardown {scenario}")
        return took
    finally:
        w.close()


def main(args: argparse.Namespace) -> int:
    logging.getLogger("verifiedring").setLevel(logging.ERROR)  # 'short' warns, by design
    print(f"teardown: close() with one remote reader, {args.messages} messages, "
          f"{args.repeats} runs each")
    print(f"{'scenario':>9} {'linger s':>9} {'median ms':>10} {'max ms':>8} {'max/linger':>11}")
    for scenario in SCENARIOS:
        linger = args.linger if scenario == "short" else DEFAULT_LINGER
        times = [_one(scenario, args.messages, linger) for _ in range(args.repeats)]
        print(f"{scenario:>9} {linger:>9.1f} {statistics.median(times) * 1e3:>10.1f} "
              f"{max(times) * 1e3:>8.1f} {max(times) / linger:>11.3f}")
    return 0
