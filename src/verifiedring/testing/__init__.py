"""Tools for testing code built on verifiedring, shipped for users as well as this repo.

Importing this package (or any of its modules but ``queue_trace`` / ``queue_runs``)
imports neither torch nor zmq; torch loads inside the functions that need it.

* :func:`wait_blocked` (:mod:`~verifiedring.testing.blocked`) -- returns once a
  thread is inside one of the library's waits, or a ring reader asleep on its word:
  the seam a test waits on instead of sleeping.
* :mod:`~verifiedring.testing.probe` -- :class:`FlagProbe` reads a ring's flag
  bytes from outside; :class:`RecordingObserver` records every protocol step.
* :mod:`~verifiedring.testing.scheduler` -- :class:`Scheduler` runs real cursors
  in threads one protocol step at a time, in an order the test chooses.
* :mod:`~verifiedring.testing.launcher` -- :class:`Supervisor` / :func:`run_tasks`
  run spawned processes, bounded in time, each reachable by name (pid, signal, a
  channel of its own); :func:`run_group` a torch.distributed world.
* :mod:`~verifiedring.testing.samples` -- deterministic tensor dicts and nested
  metadata, and exact (bit-for-bit, aliasing-aware) comparisons.
* trace validation -- :mod:`~verifiedring.testing.trace` / ``trace_runs`` (the
  ring), :mod:`~verifiedring.testing.queue_trace` / ``queue_runs`` (the queue):
  record a multiprocess run, have TLC (:mod:`~verifiedring.testing.tlc`, the
  ``testing`` extra) replay it against the spec.
"""

from .blocked import wait_blocked

__all__ = ["wait_blocked"]
