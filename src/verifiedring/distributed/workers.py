"""Method-call broadcast: the driver calls, every worker runs the same call.

The driver (group rank ``driver_rank``, the queue's writer) calls
``run_workers(method, driver_kwargs, **kwargs)``: ``(method, kwargs)`` goes
through the queue, then the driver runs ``target.method(**kwargs,
**driver_kwargs)`` itself and returns its result. Every other rank sits in
``worker_loop()``, which receives the calls in order and runs
``target.method(**kwargs)``. ``stop_workers()`` ends the loops cleanly (they
return the number of calls they ran); nothing calls ``os._exit``.

Errors come back through a small reverse channel over the CPU group (gloo):
at an **ack point** every rank all-reduces one int (MAX) saying whether it has
an unreported exception; when one does, ``gather_object`` brings each failed
worker's (call number, method, traceback) to the driver, which raises
:class:`~verifiedring.errors.BrokenPeerError` naming the worker ranks and their
exceptions. A failed worker keeps serving calls, so the group is never left
hung by a worker exception (a method that itself runs collectives is the
caller's to keep in step; give the group a collective timeout).

When the driver waits: ``ack_every=1`` (default) makes every call an ack
point -- the error surfaces on the call that raised, at the cost of one gloo
all-reduce per call. ``ack_every=N`` acks every N calls, ``ack_every=0`` only at
``sync()`` and ``stop_workers()``; a worker's exception then surfaces at the
next ack point (the first one is kept, later ones of the same worker dropped
until reported). ``bench/broadcast_object.py`` measures both.
"""

from __future__ import annotations

import traceback
from typing import Any

import torch

from ..errors import BrokenPeerError, MisuseError
from .broadcaster import GroupBroadcaster

_CALL, _SYNC, _STOP = "call", "sync", "stop"


class WorkerGroup:
    """Run methods of ``target`` on every rank of ``broadcaster``'s group, in step."""

    def __init__(
        self,
        broadcaster: GroupBroadcaster,
        target: Any,
        *,
        driver_rank: int | None = None,
        ack_every: int = 1,
    ) -> None:
        if ack_every < 0:
            raise MisuseError(f"ack_every must be >= 0, got {ack_every}")
        self.b = broadcaster
        self.target = target
        self.driver_rank = broadcaster.queue_src if driver_rank is None else driver_rank
        self.ack_every = ack_every
        self.calls = 0
        self._error: tuple[int, str, str] | None = None
        self._stopped = False

    @property
    def is_driver(self) -> bool:
        return self.b.rank == self.driver_rank

    def _require(self, driver: bool, op: str) -> None:
        if self.is_driver != driver:
            who = "the driver" if driver else "a worker"
            raise MisuseError(f"{op} is for {who}; rank {self.b.rank} (driver {self.driver_rank})")
        if self._stopped:
            raise MisuseError(f"{op} after stop_workers on rank {self.b.rank}")

    def run_workers(
        self, method: str, driver_kwargs: dict[str, Any] | None = None, **kwargs: Any
    ) -> Any:
        """Driver: broadcast the call, run it here (plus ``driver_kwargs``), return its result."""
        self._require(True, "run_workers")
        self.calls += 1
        self.b.broadcast_object((_CALL, method, kwargs), self.driver_rank)
        try:
            result = getattr(self.target, method)(**kwargs, **(driver_kwargs or {}))
        finally:
            if self.ack_every and self.calls % self.ack_every == 0:
                self._ack()
        return result

    def sync(self) -> None:
        """Driver: an ack point now; raises if a worker has an unreported exception."""
        self._require(True, "sync")
        self.b.broadcast_object((_SYNC,), self.driver_rank)
        self._ack()

    def stop_workers(self) -> None:
        """Driver: end every ``worker_loop`` (a final ack point)."""
        self._require(True, "stop_workers")
        self._stopped = True
        self.b.broadcast_object((_STOP,), self.driver_rank)
        self._ack()

    def worker_loop(self) -> int:
        """Worker: run the driver's calls until it stops; returns the number of calls run."""
        self._require(False, "worker_loop")
        while True:
            msg = self.b.broadcast_object(None, self.driver_rank)
            if msg[0] == _CALL:
                _, method, kwargs = msg
                self.calls += 1
                try:
                    getattr(self.target, method)(**kwargs)
                except Exception as e:
                    if self._error is None:
                        tb = traceback.format_exc()
                        self._error = (self.calls, method, f"{type(e).__name__}: {e}\n{tb}")
                if self.ack_every and self.calls % self.ack_every == 0:
                    self._ack()
            elif msg[0] == _SYNC:
                self._ack()
            else:
                self._stopped = True
                self._ack()
                return self.calls

    def _ack(self) -> None:
        import torch.distributed as dist

        group = self.b.cpu_group
        flag = torch.tensor([0 if self._error is None else 1], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        if not int(flag.item()):
            return
        reports: list[Any] = [None] * self.b.world_size if self.is_driver else []
        dst = self.b.global_ranks[self.driver_rank]
        dist.gather_object(self._error, reports if self.is_driver else None, dst=dst, group=group)
        self._error = None
        if self.is_driver:
            failed = [(r, e) for r, e in enumerate(reports) if e is not None]
            lines = [f"worker rank {r} raised in call #{n} {m}(): {tb}" for r, (n, m, tb) in failed]
            raise BrokenPeerError(
                f"{len(failed)} worker(s) raised: ranks {[r for r, _ in failed]}\n"
                + "\n".join(lines)
            )
