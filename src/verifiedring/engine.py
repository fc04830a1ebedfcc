"""EnginePolicy: what an inference engine may change in the core, in one value.

The core runs alone with the defaults below (verifiedring's own behaviour). An
engine layer (:mod:`verifiedring.compat.vllm`'s ``install()``) swaps in its own
policy with one :func:`set_engine_policy` call and gives the old one back the
same way; nothing else in the core is set from outside. The policy is read where
each choice is made:

==========================  ==================================================
field                       read by (when)
==========================  ==================================================
``room_check``              :func:`verifiedring.shm.preflight` (before every
                            segment is made)
``log_interval``,           :class:`verifiedring.queue.MessageQueue` (when an
``log_interval_names``      end is built: its stall-log interval)
``tensor_reducer``          :class:`verifiedring.queue.serialization.Serializer`
                            (each tensor the arena declines)
``arena_attach``            :class:`verifiedring.arena.ArenaReader` (a queue
                            reader's arena, as it attaches)
``stall_wording``           the engine's log forwarding (a stalled wait's line,
                            in the engine's words)
``wait_after_shutdown``     :class:`verifiedring.queue.reader.QueueReader` (a
                            ``dequeue(indefinite=True)`` after the writer's shutdown)
==========================  ==================================================
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import MisuseError
from .waiting import DEFAULT_LOG_INTERVAL

__all__ = ["EnginePolicy", "RoomCheck", "StallWording", "engine_policy", "set_engine_policy"]

#: ``check(size, directory, what)``: raise if ``directory`` cannot hold ``size`` more bytes.
RoomCheck = Callable[[int, str, str], None]
#: ``wording(args) -> (format, args)``: a stall line's ``%`` format and arguments, reworded.
StallWording = Callable[[tuple[Any, ...]], tuple[str, tuple[Any, ...]]]


@dataclass(frozen=True)
class EnginePolicy:
    """The engine-shaped choices of the core; each default is verifiedring's own.

    * ``room_check``: the check before a segment is made (``None``:
      :func:`verifiedring.shm.check_room`).
    * ``log_interval``: where an end reads its stall-log interval in seconds
      (``None``: the first of ``log_interval_names`` set in the environment, else
      :data:`~verifiedring.waiting.DEFAULT_LOG_INTERVAL`).
    * ``log_interval_names``: the environment variables read for it, in order (the
      engines' names, so an engine's setting applies to verifiedring's ends).
    * ``tensor_reducer``: what reduces a ``torch.Tensor`` the arena declines, at each
      tensor (``None``: :func:`verifiedring.queue.serialization.reduce_tensor`).
    * ``arena_attach``: called with each queue reader's arena as it attaches
      (``None``: nothing is called).
    * ``stall_wording``: a stalled wait's line in the engine's words (``None``:
      verifiedring's).
    * ``wait_after_shutdown``: vLLM's reader never learns that its writer shut down: a
      worker's busy loop (``dequeue(indefinite=True)``) ends only when its own process
      is told to stop, and any error out of it is a worker crash to vLLM. ``True``: such
      a dequeue waits as for a writer that sends nothing; ``False`` (verifiedring's): it
      raises :class:`~verifiedring.errors.ClosedError`.
    """

    room_check: RoomCheck | None = None
    log_interval: Callable[[], float] | None = None
    log_interval_names: tuple[str, ...] = (
        "VLLM_RINGBUFFER_WARNING_INTERVAL", "SGLANG_RINGBUFFER_WARNING_INTERVAL",
    )
    tensor_reducer: Callable[[Any], Any] | None = None
    arena_attach: Callable[[Any], None] | None = None
    stall_wording: StallWording | None = None
    wait_after_shutdown: bool = False

    def stall_log_interval(self) -> float:
        """The stall-log interval (seconds) an end built now takes (see the fields)."""
        if self.log_interval is not None:
            return self.log_interval()
        for name in self.log_interval_names:
            value = os.environ.get(name)
            if value:
                try:
                    seconds = float(value)
                except ValueError:
                    raise MisuseError(f"{name}={value!r} is not a number of seconds") from None
                if not seconds > 0:
                    raise MisuseError(f"{name}={value!r} must be > 0 seconds")
                return seconds
        return DEFAULT_LOG_INTERVAL


#: The policy in force; read it with :func:`engine_policy`, swap it with :func:`set_engine_policy`.
policy = EnginePolicy()


def engine_policy() -> EnginePolicy:
    """The policy in force."""
    return policy


def set_engine_policy(new: EnginePolicy | None) -> EnginePolicy:
    """Put ``new`` in force (``None``: the defaults) and return the one it replaces."""
    global policy
    old, policy = policy, EnginePolicy() if new is None else new
    return old
