"""A stall line says how long the peer has been behind: the writer, how long ago the
chunk a reader has not read was published; a reader, how long ago it last took a message
(issue 28, item 5). Before, the line named the peer but gave no time."""

from __future__ import annotations

import logging
import os
import re
import socket
import time

import pytest

from verifiedring import MessageQueue, RingTimeoutError

T = 10.0
LOOPBACK = "127.0.0.1"
_AGO = r"(\d+\.\d) s ago"


def _age(pattern: str, text: str) -> float:
    """The one figure in ``text``, which must match ``pattern`` whole."""
    m = re.fullmatch(pattern, text)
    assert m is not None, (pattern, text)
    return float(m.group(1))


def test_a_writer_stall_says_how_long_ago_the_chunk_a_reader_has_not_read_was_published(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pid, host = os.getpid(), socket.gethostname()
    with MessageQueue(1, 1, max_chunk_bytes=256, max_chunks=1) as w:
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
        try:
            for q in (w, r):
                q.wait_until_ready(T)
            w.log_interval = 0.2
            t0 = time.monotonic()
            w.enqueue("a", timeout=T)
            caplog.set_level(logging.WARNING, "verifiedring")
            with pytest.raises(RingTimeoutError) as info:
                w.enqueue("b", timeout=0.5)
            bound = time.monotonic() - t0
        finally:
            r.close()
    behind = (rf"readers \[0\] \(reader rank 0 \(pid {pid} on host {re.escape(host)}\), its "
              rf"process is alive\) have not read it, published {_AGO}")
    err = (rf"writer \(pid {pid}\) could not enqueue message seq 1: local reader ranks \[0\] "
           rf"have not read the chunk it needs \(reader rank 0 \(pid {pid} on host "
           rf"{re.escape(host)}\)\); ring: writer \(pid {pid}\) of ring '[^']+' timed out "
           r"after \d+\.\d+ s on chunk 0: saw written=1, read flags=\[0\], expected written=0 "
           rf"or every read flag 1; {behind}")
    assert 0.5 <= _age(err, str(info.value)) <= bound + 0.05
    lines = [x.getMessage() for x in caplog.records]
    assert len(lines) >= 1
    line = (rf"pid {pid} still waiting after \d+\.\d s: writer of ring '[^']+' waits for chunk 0 "
            rf"to be free \(written=1, read flags=\[0\]\); {behind}")
    assert 0.2 <= _age(line, lines[0]) <= bound


@pytest.mark.parametrize("channel", ["local", "remote"])
def test_a_reader_stall_says_how_long_ago_it_last_took_a_message(
    channel: str, caplog: pytest.LogCaptureFixture,
) -> None:
    pid, host = os.getpid(), socket.gethostname()
    local = [0] if channel == "local" else []
    with MessageQueue(1, len(local), local, connect_ip=LOOPBACK) as w:
        r = MessageQueue.create_from_handle(w.export_handle(), 0)
        try:
            for q in (w, r):
                q.wait_until_ready(T)
            r.log_interval = 0.2
            caplog.set_level(logging.WARNING, "verifiedring")
            with pytest.raises(RingTimeoutError):
                r.dequeue(timeout=0.3)
            before = [x.getMessage() for x in caplog.records]
            caplog.clear()
            w.enqueue("a", timeout=T)
            assert r.dequeue(timeout=T) == "a"
            t0 = time.monotonic()
            with pytest.raises(RingTimeoutError):
                r.dequeue(timeout=0.5)
            bound = time.monotonic() - t0
            after = [x.getMessage() for x in caplog.records]
        finally:
            r.close()
    writer = rf"the writer \(pid {pid} on host {re.escape(host)}\)"
    if channel == "local":
        wait = (rf"pid {pid} still waiting after {{}} s: local reader rank 0 \(pid {pid}\) "
                rf"waits for message seq {{}} in chunk {{}} \(written=0, read flags=\[0\]\) "
                rf"from {writer}, its process holds the ring")
        first, then = wait.format(r"\d+\.\d", 0, 0), wait.format(r"\d+\.\d", 1, r"\d+")
    else:
        wait = (rf"pid {pid} still waiting after {{}} s: remote reader rank 0 \(pid {pid}\) "
                rf"waits for message seq {{}} on the remote socket from {writer}")
        first, then = wait.format(r"\d+\.\d", 0), wait.format(r"\d+\.\d", 1)
    assert len(before) >= 1 and len(after) >= 1, (before, after)  # one per 0.2 s waited
    assert re.fullmatch(first + "; it has taken no message yet", before[0]), before[0]
    assert 0.2 <= _age(then + f"; it last took a message {_AGO}", after[0]) <= bound + 0.05
