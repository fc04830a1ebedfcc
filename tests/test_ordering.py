"""The fence vocabulary: the C fence when built, the lock fallback otherwise."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from verifiedring import ordering


def test_fence_kind_is_known_and_callable() -> None:
    assert ordering.FENCE_KIND in {"c11-seq-cst", "lock"}
    ordering.fence()


def test_lock_fallback_carries_a_real_round_trip() -> None:
    """With the C extension hidden, the ring still delivers exactly, over the lock fence."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["verifiedring._fence"] = None  # make the import fail
        from verifiedring import ShmRingBuffer, ordering
        assert ordering.FENCE_KIND == "lock", ordering.FENCE_KIND
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
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
