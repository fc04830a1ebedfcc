"""Read a ring's flag bytes from outside and record its protocol steps.

:class:`FlagProbe` maps the ring's segment a second time (through the public
:class:`~verifiedring.shm.SharedSegment` and :class:`~verifiedring.layout.RingLayout`)
so a test or trace recorder can snapshot flag bytes without touching the
ring's private state. :class:`RecordingObserver` is a
:class:`~verifiedring.steps.StepObserver` that records one :class:`StepEvent`
per step: who, which step, which chunk / read flag, and the chunk's flag bytes
before and after the step. Neither imports torch or zmq.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..layout import RingLayout
from ..ring import RingHandle, ShmRingBuffer
from ..shm import SharedSegment

Flags = tuple[int, ...]


class FlagProbe:
    """A second, read-only-by-contract mapping of a ring's flag area."""

    def __init__(self, ring: ShmRingBuffer | RingHandle) -> None:
        handle = ring.handle() if isinstance(ring, ShmRingBuffer) else ring
        self.layout: RingLayout = handle.layout
        self._segment = SharedSegment.attach(handle.name, self.layout.total_bytes)

    def flags(self, chunk: int) -> Flags:
        """``(written, read0, read1, ...)`` of ``chunk``."""
        off = self.layout.flags_offset(chunk)
        return tuple(self._segment.buf[off : off + self.layout.flags_per_chunk])

    def all_flags(self) -> list[Flags]:
        return [self.flags(c) for c in range(self.layout.max_chunks)]

    def close(self) -> None:
        self._segment.close()


@dataclass(frozen=True)
class StepEvent:
    """One protocol step as a trace recorder sees it."""

    actor: str
    action: str
    chunk: int
    reader: int | None
    before: Flags
    after: Flags

    def __str__(self) -> str:
        flag = "" if self.reader is None else f" read flag {self.reader}"
        return (
            f"{self.actor:>8} {self.action:<20} chunk {self.chunk}{flag}: "
            f"flags {_fmt(self.before)} -> {_fmt(self.after)}"
        )


def _fmt(flags: Flags) -> str:
    return f"w={flags[0]} r={list(flags[1:])}"


class RecordingObserver:
    """Records every step of the cursors it is installed on (any number of them)."""

    def __init__(self, probe: FlagProbe) -> None:
        self.probe = probe
        self.events: list[StepEvent] = []
        self._before: dict[str, Flags] = {}

    def before_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        self._before[actor] = self.probe.flags(chunk)

    def after_step(self, actor: str, action: str, chunk: int, reader: int | None) -> None:
        before = self._before.pop(actor)
        self.events.append(
            StepEvent(actor, action, chunk, reader, before, self.probe.flags(chunk))
        )

    def actions(self, actor: str | None = None) -> list[str]:
        return [e.action for e in self.events if actor is None or e.actor == actor]

    def clear(self) -> None:
        self.events.clear()

    def format(self, last: int | None = None) -> str:
        events = self.events if last is None else self.events[-last:]
        skipped = len(self.events) - len(events)
        head = [f"... {skipped} earlier steps"] if skipped else []
        return "\n".join(head + [f"{n:4d} {e}" for n, e in enumerate(events, skipped)])
