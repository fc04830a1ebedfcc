"""The fence vocabulary: one live fence() per ordering, the C fence in CI, a real fallback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from verifiedring import ordering

SRC = Path(__file__).resolve().parent.parent / "src" / "verifiedring"
LABELS = {"FW1", "FW2", "FW3", "FW4", "FR0", "FR1", "FR2", "FS1", "FS2"}


def test_each_ordering_labels_exactly_one_live_fence_call() -> None:
    live = Counter(
        m.group(1)
        for line in (SRC / "cursors.py").read_text().splitlines()
        if (m := re.match(r"\s*fence\(\)\s*#\s*(F[WRS]\d):", line))
    )
    assert set(live) == LABELS, f"labels: {sorted(live)}"
    assert all(n == 1 for n in live.values()), live
    arena = Counter(
        m.group(1)
        for line in (SRC / "arena.py").read_text().splitlines()
        if (m := re.match(r"\s*fence\(\)\s*#\s*(FA\d):", line))
    )
    assert arena == {"FA1": 1, "FA2": 1, "FA3": 1, "FA4": 1, "FA5": 1}, arena
    library = [f for f in SRC.rglob("*.py") if "testing" not in f.relative_to(SRC).parts]
    calls = sum(1 for f in library for line in f.read_text().splitlines()
                if re.match(r"\s*fence\(\)", line))
    assert calls == len(LABELS) + len(arena), "a fence() call without its ordering label"
    listed = set(re.findall(r"^\s+(F[WRS]\d)\s", ordering.__doc__ or "", re.MULTILINE))
    assert listed == LABELS, f"ordering.py lists {sorted(listed)}"


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="CI builds the C fence; here: any")
def test_ci_runs_the_c_fence() -> None:
    assert ordering.FENCE_KIND == "c11-seq-cst"


def test_lock_fallback_takes_the_lock_at_every_fence_of_a_round_trip() -> None:
    """With the C extension hidden (on x86), every fence() is a lock acquire and release
    -- 5 per write (FS2 after the publish) and 3 per read -- and the ring still
    delivers exactly; the reader's waits sleep, doubling (no futex without it)."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["verifiedring._fence"] = None  # make the import fail
        from verifiedring import ShmRingBuffer, ordering
        assert ordering.FENCE_KIND == "lock", ordering.FENCE_KIND
        calls = []
        real_acquire, real_release = ordering._acquire, ordering._release
        ordering._acquire = lambda: (calls.append("a"), real_acquire())[1]
        ordering._release = lambda: (calls.append("r"), real_release())[1]
        with ShmRingBuffer(2, 16, 2) as ring:
            w = ring.writer()
            readers = [ShmRingBuffer.attach(ring.handle()) for _ in range(2)]
            cursors = [r.reader(i) for i, r in enumerate(readers)]
            got = [[], []]
            for k in range(5):
                with w.acquire_write(timeout=1) as buf:
                    buf[:1] = bytes([k])
                for i, c in enumerate(cursors):
                    with c.acquire_read(timeout=1) as buf:
                        got[i].append(buf[0])
            for r in readers:
                r.close()
        assert got == [list(range(5))] * 2, got
        assert calls == ["a", "r"] * (5 * 5 + 10 * 3), len(calls)
        from verifiedring import waiting
        assert waiting.SLEEP_KIND == "doubling-sleep" and cursors[0].sleeper is None
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_no_lock_fallback_off_x86() -> None:
    code = textwrap.dedent(
        """
        import platform, sys
        sys.modules["verifiedring._fence"] = None
        platform.machine = lambda: "aarch64"
        try:
            import verifiedring.ordering
        except ImportError as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "needs its C fence (verifiedring._fence) on aarch64" in out.stdout, out.stderr
