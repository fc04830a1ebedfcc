"""remote_curve: what the encrypted remote channel costs, against plain ZeroMQ.

One process, loopback TCP, one message in flight: the time from ``send`` to the
reader holding the object, for 1 KiB and 1 MiB ``bytes``. Three transports in
the same run, alternating: the MessageQueue's remote channel (CurveZMQ),
PUB/SUB with CURVE, PUB/SUB in plaintext. ``curve / plain`` is what encryption
costs; ``queue / curve`` is what the queue adds (pickling, sequence numbers,
credit). Reported per message and as ratios; nothing asserts on time.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time
from collections.abc import Callable
from typing import Any

import zmq

LOOPBACK = "127.0.0.1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--iters", type=int, default=2000, help="messages per repeat (1 KiB)")
    parser.add_argument("--repeats", type=int, default=5)


def _per_message(send: Callable[[Any], None], recv: Callable[[], Any], obj: Any,
                 iters: int, repeats: int) -> float:
    for _ in range(min(iters, 50)):  # warm up
        send(obj)
        recv()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            send(obj)
            recv()
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def _zmq_pair(curve: bool) -> tuple[zmq.Context[Any], zmq.Socket[Any], zmq.Socket[Any]]:
    ctx: zmq.Context[Any] = zmq.Context()
    pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
    if curve:
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        pub.curve_server = True
        pub.curve_secretkey = server_secret
        sub.curve_serverkey, sub.curve_publickey = server_public, client_public
        sub.curve_secretkey = client_secret
    pub.bind(f"tcp://{LOOPBACK}:0")
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(pub.getsockopt(zmq.LAST_ENDPOINT).decode())
    time.sleep(0.3)  # slow joiner
    return ctx, pub, sub


def main(args: argparse.Namespace) -> int:
    from verifiedring import MessageQueue

    w = MessageQueue(1, 0, connect_ip=LOOPBACK)
    r = MessageQueue.create_from_handle(w.export_handle(), 1)
    w.wait_until_ready(30)
    r.wait_until_ready(30)
    pairs = {name: _zmq_pair(curve) for name, curve in (("curve", True), ("plain", False))}
    rows: dict[tuple[str, int], float] = {}
    try:
        for size, iters in ((1024, args.iters), (1 << 20, max(args.iters // 20, 20))):
            obj = b"x" * size
            for _ in range(2):  # alternate the transports
                t = _per_message(w.enqueue, r.dequeue, obj, iters, args.repeats)
                rows[("queue", size)] = min(rows.get(("queue", size), t), t)
                for name, (_, pub, sub) in pairs.items():

                    def send(o: Any, pub: zmq.Socket[Any] = pub) -> None:
                        pub.send(pickle.dumps(o, protocol=5), copy=False)

                    def recv(sub: zmq.Socket[Any] = sub) -> Any:
                        return pickle.loads(sub.recv(copy=False).buffer)

                    t = _per_message(send, recv, obj, iters, args.repeats)
                    rows[(name, size)] = min(rows.get((name, size), t), t)
    finally:
        r.close()
        w.close()
        for ctx, pub, sub in pairs.values():
            pub.close(linger=0)
            sub.close(linger=0)
            ctx.term()
    print(f"remote_curve: median of {args.repeats} repeats, one message in flight, loopback TCP")
    print(f"{'size':>8} {'queue us':>10} {'curve us':>10} {'plain us':>10} "
          f"{'curve/plain':>12} {'queue/curve':>12}")
    for size in (1024, 1 << 20):
        q, c, p = (rows[(k, size)] * 1e6 for k in ("queue", "curve", "plain"))
        print(f"{size:>8} {q:>10.1f} {c:>10.1f} {p:>10.1f} {c / p:>12.2f} {q / c:>12.2f}")
    return 0
