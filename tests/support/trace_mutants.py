"""Known bugs for trace validation, put into the real code inside the traced processes.

Each ring mutant is a text patch of one real cursor method, as in
``tests/mutants/catalog.toml``: the ``original`` snippet must occur exactly once in
the method's source, else building the mutant fails (the code drifted: update the
snippet). The patched method is compiled in its module's namespace and set
on a subclass; the hook gives the traced cursor that class. The queue mutants wrap
the real code: a subclass that calls the real ``enqueue``, a loader that calls the
real one.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from verifiedring.cursors import ReaderCursor, WriterCursor
from verifiedring.queue import local_path
from verifiedring.queue.writer import QueueWriter
from verifiedring.testing import faults


def patched(name: str, cls: type[Any], method: str, *patches: tuple[str, str]) -> type[Any]:
    """The subclass ``name`` of ``cls`` whose ``method`` is the real one with each
    ``(original, replacement)`` applied in order, each original matching exactly once."""
    real = getattr(cls, method)
    module = sys.modules[real.__module__]
    source = inspect.getsource(real)
    for original, replacement in patches:
        found = source.count(original)
        if found != 1:
            raise AssertionError(
                f"{cls.__name__}.{method}: the mutant's snippet occurs {found} times, not once "
                f"(the code drifted: update it):\n{original}"
            )
        source = source.replace(original, replacement)
    namespace: dict[str, Any] = {}
    exec(compile(textwrap.dedent(source), module.__file__ or "", "exec"), vars(module), namespace)
    # the method and its aliases (``__enter__ = take``) all become the mutant
    names = {n for n, v in vars(cls).items() if v is real} | {method}
    return type(name, (cls,), {**dict.fromkeys(names, namespace[method]), "__module__": __name__})


_CLEARS = """\
        for r, pos in self._positions:
            # spec: WriterClearReadFlag (one single-byte store per reader, in order)
            if obs is not None:
                obs.before_step(WRITER_ACTOR, WRITER_CLEAR_READ_FLAG, i, r)
            flags[pos] = 0
            if obs is not None:
                obs.after_step(WRITER_ACTOR, WRITER_CLEAR_READ_FLAG, i, r)
        fence()  # FW4: read-flag clears before written = 1
"""
_PUBLISH = """\
        # spec: WriterPublish
        if obs is not None:
            obs.before_step(WRITER_ACTOR, WRITER_PUBLISH, i, None)
        flags[WRITTEN_POSITION] = 1
        self.index = (i + 1) % self._max_chunks
"""
_PUBLISHED = """\
            if obs is not None:
                obs.after_step(WRITER_ACTOR, WRITER_PUBLISH, i, None)
"""

#: Writer: written = 1 before the read flags are cleared (the step's end moves with it).
PublishBeforeClear = patched(
    "PublishBeforeClear", WriterCursor, "publish",
    (_PUBLISHED, ""),
    (_CLEARS + _PUBLISH, _PUBLISH + textwrap.indent(textwrap.dedent(_PUBLISHED), " " * 8)
     + _CLEARS),
)

#: Writer: a chunk is free as soon as ANY reader's flag is 1.
AnyReader = patched(
    "AnyReader",
    WriterCursor,
    "_poll_free",
    (
        "                if not seen:\n                    return False\n",
        "                if seen:  # BUG: one reader done frees the chunk for every reader\n"
        "                    break\n            else:\n                return False\n",
    ),
)

#: Reader: its read flag is stored before the caller loads the payload.
ReleaseBeforePayload = patched(
    "ReleaseBeforePayload",
    ReaderCursor,
    "take",
    (
        "        self._holding = True\n",
        "        self._flags[self.index][self._own] = 1  # BUG: released before the loads\n"
        "        self._holding = True\n",
    ),
)

#: Reader: hands its caller the next chunk's bytes (an off-by-one view index).
WrongChunk = patched(
    "WrongChunk",
    ReaderCursor,
    "take",
    (
        "        return self._data[self.index]\n",
        "        return self._data[(self.index + 1) % self._max_chunks]  # BUG: index + 1\n",
    ),
)


def publish_before_clear(cursor: WriterCursor) -> None:
    cursor.__class__ = PublishBeforeClear


def any_reader(cursor: WriterCursor) -> None:
    cursor.__class__ = AnyReader


def release_before_payload(cursor: ReaderCursor) -> None:
    cursor.__class__ = ReleaseBeforePayload


def wrong_chunk(cursor: ReaderCursor) -> None:
    cursor.__class__ = WrongChunk


def shifted_flag(cursor: ReaderCursor) -> None:
    """Reader k: uses reader k+1's read flag (a flag index off by one)."""
    n = cursor.layout.n_reader
    cursor._own = cursor.layout.read_flag_position((cursor.reader + 1) % n)


#: name -> (the side it applies to, the hook that puts the bug into that side's cursor)
MUTANTS: dict[str, tuple[str, Callable[[Any], None]]] = {
    "publish_before_clear": ("writer", publish_before_clear),
    "any_reader": ("writer", any_reader),
    "release_before_payload": ("reader", release_before_payload),
    "wrong_chunk": ("reader", wrong_chunk),
    "shifted_flag": ("reader", shifted_flag),
}


def ring_hooks(mutant: str) -> dict[str, Callable[[Any], None]]:
    """``RunConfig`` keywords that put ``mutant`` into its side's traced cursor."""
    side, hook = MUTANTS[mutant]
    return {f"{side}_hook": hook}


# --- the queue ----------------------------------------------------------------------


def stale_inline_loads() -> None:
    """Reader (a ``reader_setup``): from the 3rd inline message on, hand back the
    previous inline object (the bytes of another chunk) instead of this one."""
    original = local_path._load_inline
    previous: list[Any] = []

    def load(chunk: Any, header: Any) -> Any:
        obj = original(chunk, header)
        handed = previous[-1] if len(previous) >= 2 else obj
        previous.append(obj)
        return handed

    local_path._load_inline = load


class ReusesSeq(QueueWriter):
    """Writer (a ``writer_type``): after message 4 the sequence number is not advanced."""

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        super().enqueue(obj, timeout)
        if faults.next_seq(self) == 5:
            faults.skip_to_seq(self, 4)


#: name -> ``QueueRunConfig`` keywords that put the bug into the traced run
QUEUE_MUTANTS: dict[str, dict[str, Any]] = {
    "reader-wrong-object": {"reader_setup": stale_inline_loads},
    "writer-reuses-seq": {"writer_type": ReusesSeq},
}
