"""Tools for testing code built on verifiedring, shipped for users as well as this repo.

Importing this package (or any of its modules) imports neither torch nor zmq;
torch loads inside the functions that need it.

* :mod:`~verifiedring.testing.probe` -- :class:`FlagProbe` reads a ring's flag
  bytes from outside; :class:`RecordingObserver` records every protocol step.
* :mod:`~verifiedring.testing.scheduler` -- :class:`Scheduler` runs real cursors
  in threads one protocol step at a time, in an order the test chooses.
* :mod:`~verifiedring.testing.launcher` -- :class:`Supervisor` / :func:`run_tasks`
  run spawned processes, bounded in time; :func:`run_group` a torch.distributed world.
* :mod:`~verifiedring.testing.samples` -- deterministic tensor dicts and nested
  metadata, and exact (bit-for-bit, aliasing-aware) comparisons.
"""
