"""How a namespace run is set up and bounded (:class:`Sandbox`), and what it did and left
(:class:`NamespaceResult`); :mod:`.namespaces` runs it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MIB = 1024 * 1024


@dataclass(frozen=True)
class Sandbox:
    """How a namespace is set up, and the bounds of a run in it."""

    #: Size of the private tmpfs on /dev/shm.
    shm_bytes: int = 16 * MIB
    #: Size of the private tmpfs that is TMPDIR.
    tmp_bytes: int = 16 * MIB
    #: The namespace's host name (UTS namespace).
    hostname: str = "vr-sandbox"
    #: Seconds the target may run; then it and every other process are killed.
    timeout: float = 60.0
    #: Seconds the processes the target left running may go on after it exited
    #: (e.g. a resource tracker finishing its clean-up); then they are SIGKILLed.
    settle: float = 5.0
    #: Added to the environment of the target (TMPDIR is set to the private tmpfs).
    env: Mapping[str, str] = field(default_factory=dict)
    #: The target's working directory (default: the caller's).
    cwd: str | None = None
    #: Extra ``/etc/hosts`` lines (name -> address), bind-mounted over the file inside.
    hosts: Mapping[str, str] = field(default_factory=dict)
    #: Commands run inside (as root, after the mounts, before the target), each
    #: bounded by ``timeout``; one that fails ends the run (``setup_error``).
    setup: Sequence[Sequence[str]] = ()


@dataclass(frozen=True)
class NamespaceResult:
    """What one run did and left."""

    #: The target's exit status (negative: the signal that killed it); ``None`` if it
    #: never ended by itself (timed out, or the namespace could not be set up).
    returncode: int | None
    stdout: str
    stderr: str
    #: The target was still running at ``Sandbox.timeout`` (or the host's backstop).
    timed_out: bool
    #: Seconds from the target's start to its end, measured inside.
    elapsed: float
    #: What was in the private /dev/shm at the end (relative paths, directories end in "/").
    shm_left: tuple[str, ...]
    #: What was in the private TMPDIR at the end.
    tmp_left: tuple[str, ...]
    #: Processes still running ``settle`` seconds after the target ended (killed then).
    stragglers: tuple[str, ...]
    #: Host pids of processes still in the namespace after the run (should be empty).
    lingering: tuple[int, ...]
    #: Why the namespace could not be set up, if it could not.
    setup_error: str | None = None
    #: :func:`run_callable`: what the callable returned.
    value: Any = None
    #: :func:`run_callable`: the traceback of what it raised, if it raised.
    raised: str | None = None

    @property
    def left(self) -> tuple[str, ...]:
        """Every entry left, as ``shm:<name>`` and ``tmp:<name>``."""
        return tuple(f"shm:{n}" for n in self.shm_left) + tuple(f"tmp:{n}" for n in self.tmp_left)

    def describe(self) -> str:
        """Everything, for an assertion message."""
        return (
            f"returncode={self.returncode} timed_out={self.timed_out} elapsed={self.elapsed:.2f}s "
            f"setup_error={self.setup_error!r}\nleft={list(self.left)} stragglers="
            f"{list(self.stragglers)} lingering={list(self.lingering)}\nraised={self.raised}\n"
            f"--- stdout ---\n{self.stdout[-6000:]}\n--- stderr ---\n{self.stderr[-6000:]}"
        )

    def check(self) -> Any:
        """The callable's value; raise :class:`AssertionError` describing the run unless
        it exited 0, in time, without raising, and the namespace was torn down."""
        if (
            self.returncode != 0 or self.timed_out or self.setup_error or self.raised
            or self.lingering
        ):
            raise AssertionError(f"namespace run failed:\n{self.describe()}")
        return self.value
