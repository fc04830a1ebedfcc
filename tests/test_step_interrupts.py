"""A real signal (SIGUSR1, whose handler raises) in the windows issue 30's table lists,
each found by the enumeration (``tests/interrupts``); each test failed before its fix.

* the writer cut at the entry of its commit of a claimed chunk: it kept holding the
  chunk and every later enqueue raised MisuseError "already holds chunk";
* the tensor pickler's cleanup cut before its parts were emptied: the next message
  carried the cut one's bytes (m1 delivered for m2);
* a local reader cut at the entry of the release of a chunk it had taken and decoded:
  the message was consumed and never returned nor reported;
* a second interrupt in the dequeue that pays an owed DecodeError: it was dropped;
* acquire_read cut as it made the lent view: the chunk stayed lent, the owed
  DecodeError came, and every later call raised MisuseError "already holds chunk";
* the writer cut while the first chunk of a streamed run was filled: an ABORT with
  part 0 went where a message starts and every reader broke for good (now the run is
  withdrawn: nothing of it was sent);
* the run writer cut in its bookkeeping after a publish (the part count, the run's
  end): the next call's ABORT repeated a part or followed the LAST (now it catches up
  first: the run moves past the chunk that is out, or is over);
* a local reader cut as it starts or loads a run: it broke for good, or held the
  FIRST chunk (MisuseError "already holds chunk" on every call); now the run counts as
  cut from before its sequence number moves, and the next dequeue skips its rest and
  reports it;
* the writer cut inside its telling of BROKEN: no reader was told (a survivor timed
  out); now the BROKEN is owed and the writer's next call (a refusal) sends it;
* close() cut before its SHUTDOWN went out: the readers learned only that the writer
  was gone (BrokenPeerError); now the sockets' close sends the SHUTDOWN owed first;
* a second interrupt in the next call: in the dequeue that skips a cut run's rest, as
  it made the run's DecodeError (the report was dropped); in the writer's next call,
  right after its due ABORT went out (a second ABORT followed it);
* a frame taken off the ZeroMQ socket, cut before it was consumed (a remote reader's,
  a local overflow frame): the reader broke for good on the next sequence number; now
  that message is reported as its DecodeError and the next ones delivered.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import CodeType
from typing import Any

import pytest
from support.signals import (  # noqa: F401 (a fixture)
    Interrupt,
    assert_interrupted,
    on_python_steps,
    signal_at_c_call,
    signal_at_entry,
    sigusr1,
)

from verifiedring import (
    BrokenPeerError,
    ClosedError,
    DecodeError,
    MessageAbortedError,
    MessageQueue,
)
from verifiedring.queue import LocalReader, QueueWriter, wire
from verifiedring.queue.flavors.control import LocalControl
from verifiedring.queue.flavors.run.reader import RunReader
from verifiedring.queue.flavors.run.receiver import RunReceiver
from verifiedring.queue.flavors.run.writer import RunWriter
from verifiedring.queue.held_chunk import TakenChunk
from verifiedring.queue.outcomes import ReaderOutcomes
from verifiedring.queue.serialization import Serializer
from verifiedring.queue.transmitters import LocalTransmitter
from verifiedring.queue.writer_control import WriterControl
from verifiedring.queue.writer_cuts import CutCalls

T = 10.0


@pytest.fixture
def queue() -> Iterator[tuple[QueueWriter, LocalReader]]:
    """A writer and its one local reader (1 KiB chunks, 4 of them)."""
    w = QueueWriter(1, 1, [0], max_chunk_bytes=1024, max_chunks=4)
    r = LocalReader(w.export_handle(), 0)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    yield w, r
    r.close()
    w.close()


def _cut_at_entry(call: Any, code: CodeType) -> None:
    assert_interrupted(call, signal_at_entry(code))


@pytest.mark.usefixtures("sigusr1")
def test_a_writer_cut_at_its_commit_entry_sends_nothing_and_goes_on(
    queue: tuple[QueueWriter, LocalReader]
) -> None:
    w, r = queue
    on_python_steps(w)
    w.enqueue("m0", timeout=T)
    _cut_at_entry(lambda: w.enqueue("m1", timeout=T), LocalTransmitter.commit.__code__)
    w.enqueue("m2", timeout=T)
    w.enqueue("m3", timeout=T)
    assert [r.dequeue(timeout=T) for _ in range(3)] == ["m0", "m2", "m3"]


@pytest.mark.usefixtures("sigusr1")
def test_a_writer_cut_at_its_native_publish_call_sends_nothing_and_goes_on(
    queue: tuple[QueueWriter, LocalReader]
) -> None:
    """The native step core's one call, interrupted where CPython delivers it before the
    call runs: no store was made, m1 is not out and its number is the next message's."""
    w, r = queue
    assert w._local is not None and w._local._native_publish is not None
    w.enqueue("m0", timeout=T)
    assert_interrupted(lambda: w.enqueue("m1", timeout=T),
                       signal_at_c_call(LocalTransmitter.publish_chunk.__code__, "publish"))
    w.enqueue("m2", timeout=T)
    w.enqueue("m3", timeout=T)
    assert [r.dequeue(timeout=T) for _ in range(3)] == ["m0", "m2", "m3"]


@pytest.mark.usefixtures("sigusr1")
def test_a_pickler_cleanup_cut_leaves_no_bytes_in_the_next_message(
    queue: tuple[QueueWriter, LocalReader]
) -> None:
    pytest.importorskip("torch")  # the reused tensor pickler: the path with kept parts
    w, r = queue
    w.enqueue("m0", timeout=T)
    assert_interrupted(lambda: w.enqueue("m1", timeout=T),
                 signal_at_c_call(Serializer.dumps.__code__, "clear_memo", after="dump"))
    w.enqueue("m2", timeout=T)
    w.enqueue("m3", timeout=T)
    # cut in its pickling: m1 was not sent, and m2 carries its own bytes (not m1's)
    assert [r.dequeue(timeout=T) for _ in range(3)] == ["m0", "m2", "m3"]


@pytest.mark.usefixtures("sigusr1")
def test_a_reader_cut_at_its_release_entry_returns_the_decoded_message_next(
    queue: tuple[QueueWriter, LocalReader]
) -> None:
    w, r = queue
    for m in ("m0", "m1", "m2", "m3"):
        w.enqueue(m, timeout=T)
    assert r.dequeue(timeout=T) == "m0"
    _cut_at_entry(lambda: r.dequeue(timeout=T), TakenChunk.release_taken.__code__)
    assert [r.dequeue(timeout=T) for _ in range(3)] == ["m1", "m2", "m3"]
    w.enqueue("m4", timeout=T)  # every chunk was released: the writer does not stall
    assert r.dequeue(timeout=T) == "m4"


@pytest.mark.usefixtures("sigusr1")
def test_paying_a_message_whose_release_was_cut_releases_its_chunk_first() -> None:
    """A one-chunk ring: the reader cut at its release's entry holds m1's chunk; the
    dequeue that pays m1 released it only at the reader's next call, so the writer
    waited on it meanwhile (however long the caller worked on m1)."""
    w = MessageQueue(1, 1, [0], max_chunk_bytes=1024, max_chunks=1)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        w.enqueue("m1", timeout=T)
        _cut_at_entry(lambda: r.dequeue(timeout=T), TakenChunk.release_taken.__code__)
        assert r.dequeue(timeout=T) == "m1"
        w.enqueue("m2", timeout=0)  # the one chunk is free already: no wait
        assert r.dequeue(timeout=T) == "m2"
    finally:
        r.close()
        w.close()


@pytest.mark.usefixtures("sigusr1")
def test_a_second_interrupt_while_paying_an_owed_decode_error_keeps_it_owed(
    queue: tuple[QueueWriter, LocalReader]
) -> None:
    w, r = queue
    for m in ("m0", "m1", "m2"):
        w.enqueue(m, timeout=T)
    assert r.dequeue(timeout=T) == "m0"
    _cut_at_entry(lambda: r.dequeue(timeout=T), wire.load_inline.__code__)  # m1's unpickling
    assert_interrupted(lambda: r.dequeue(timeout=T),
                 signal_at_c_call(ReaderOutcomes.pay_owed.__code__, "isinstance"))
    with pytest.raises(DecodeError) as owed:
        r.dequeue(timeout=T)
    assert owed.value.seq == 1
    assert r.dequeue(timeout=T) == "m2"


@pytest.mark.usefixtures("sigusr1")
@pytest.mark.parametrize("channel", ["remote", "overflow"])
def test_a_frame_cut_after_its_receive_is_reported_and_the_next_delivered(channel: str) -> None:
    remote = channel == "remote"
    w = MessageQueue(1, 0 if remote else 1, None if remote else [0], max_chunk_bytes=1024,
                     max_chunks=4, connect_ip="127.0.0.1" if remote else None)
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    try:
        w.wait_until_ready(T)
        r.wait_until_ready(T)
        big = [m.encode() + bytes(4000) for m in ("m0", "m1", "m2", "m3")]  # frames
        for m in big:
            w.enqueue(m, timeout=T)
        assert r.dequeue(timeout=T)[:2] == b"m0"
        # right after the receive returned the frame: remote, at its header's parse;
        # overflow, at the BROKEN check of the frame taken for the pending marker
        cut = ReaderOutcomes.header if remote else LocalControl.note_broken
        _cut_at_entry(lambda: r.dequeue(timeout=T), cut.__code__)
        with pytest.raises(DecodeError) as lost:
            r.dequeue(timeout=T)
        assert lost.value.seq == 1
        assert [r.dequeue(timeout=T)[:2] for _ in range(2)] == [b"m2", b"m3"]
    finally:
        r.close()
        w.close()


@pytest.mark.usefixtures("sigusr1")
def test_an_acquire_read_cut_making_its_view_reports_the_message_and_goes_on(
    queue: tuple[QueueWriter, LocalReader]
) -> None:
    w, r = queue
    for m in (b"m0", b"m1", b"m2"):
        with w.acquire_write(T) as buf:
            buf[:2] = m

    def read() -> bytes:
        with r.acquire_read(T) as buf:
            return bytes(buf[:2])

    assert read() == b"m0"
    assert_interrupted(read, signal_at_c_call(TakenChunk.lend.__code__, "toreadonly"))
    with pytest.raises(DecodeError) as cut:
        read()
    assert cut.value.seq == 1
    assert read() == b"m2"


def _streamed(r: MessageQueue) -> Any:
    try:
        got = r.dequeue(timeout=T)
    except MessageAbortedError as e:
        return ("aborted", e.seq)
    except DecodeError as e:
        return ("reported", e.seq)
    return got[:2]


@pytest.fixture
def streams() -> Iterator[tuple[QueueWriter, LocalReader]]:
    """A writer and its local reader, large objects streamed (4 KiB chunks, 16)."""
    w = QueueWriter(1, 1, [0], max_chunk_bytes=4096, max_chunks=16, large_objects="stream")
    r = LocalReader(w.export_handle(), 0)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    yield w, r
    r.close()
    w.close()


BIG = {m: m.encode() + bytes(10_000) for m in ("m0", "m1", "m2", "m3")}  # runs of 3 chunks


@pytest.mark.usefixtures("sigusr1")
@pytest.mark.parametrize(("where", "then"), [
    ("write_head", [b"m2", b"m3"]),  # part 0 being filled: withdrawn, nothing sent
    ("_passed", [("aborted", 1), b"m2", b"m3"]),  # right after FIRST: aborted next call
    ("_end", [b"m1", b"m2", b"m3"]),  # right after LAST: it is sent
])
def test_a_run_writer_cut_in_a_step_leaves_every_reader_a_clean_stream(
    streams: tuple[QueueWriter, LocalReader], where: str, then: list[Any]
) -> None:
    w, r = streams
    w.enqueue(BIG["m0"], timeout=T)
    _cut_at_entry(lambda: w.enqueue(BIG["m1"], timeout=T), getattr(RunWriter, where).__code__)
    w.enqueue(BIG["m2"], timeout=T)
    w.enqueue(BIG["m3"], timeout=T)
    assert [_streamed(r) for _ in range(1 + len(then))] == [b"m0", *then]


@pytest.mark.usefixtures("sigusr1")
@pytest.mark.parametrize("code", [
    RunReader.begin.__code__, RunReceiver.take.__code__, RunReceiver.load.__code__,
], ids=["begin", "take", "load"])
def test_a_reader_cut_as_it_starts_a_run_reports_it_and_reads_on(
    streams: tuple[QueueWriter, LocalReader], code: CodeType
) -> None:
    w, r = streams
    for m in ("m0", "m1", "m2", "m3"):
        w.enqueue(BIG[m], timeout=T)
    assert _streamed(r) == b"m0"
    _cut_at_entry(lambda: r.dequeue(timeout=T), code)
    assert [_streamed(r) for _ in range(3)] == [("reported", 1), b"m2", b"m3"]


@pytest.mark.usefixtures("sigusr1")
def test_a_writer_cut_telling_broken_tells_it_at_its_next_call(
    queue: tuple[QueueWriter, LocalReader]
) -> None:
    w, r = queue
    w.enqueue("m0", timeout=T)
    # the break a failed or cut send makes, cut at its telling's entry
    _cut_at_entry(lambda: w._control.break_for_good("a send failed"),
                  WriterControl.tell_broken.__code__)
    with pytest.raises(BrokenPeerError):
        w.enqueue("m1", timeout=T)
    assert r.dequeue(timeout=T) == "m0"
    with pytest.raises(BrokenPeerError, match="a send failed"):
        r.dequeue(timeout=T)


@pytest.mark.usefixtures("sigusr1")
def test_a_close_cut_before_its_shutdown_still_tells_the_readers_the_end(
    queue: tuple[QueueWriter, LocalReader]
) -> None:
    w, r = queue
    w.enqueue("m0", timeout=T)
    _cut_at_entry(w.close, CutCalls.tell_readers.__code__)
    assert r.dequeue(timeout=T) == "m0"
    with pytest.raises(ClosedError):
        r.dequeue(timeout=T)


@pytest.mark.usefixtures("sigusr1")
def test_a_second_interrupt_as_a_cut_run_is_reported_keeps_the_report_owed(
    streams: tuple[QueueWriter, LocalReader]
) -> None:
    w, r = streams
    for m in ("m0", "m1", "m2", "m3"):
        w.enqueue(BIG[m], timeout=T)
    assert _streamed(r) == b"m0"
    _cut_at_entry(lambda: r.dequeue(timeout=T), RunReceiver.load.__code__)
    # the next dequeue skips the run's rest, then makes its report (the 2nd DecodeError)
    assert_interrupted(
        lambda: r.dequeue(timeout=T), signal_at_entry(DecodeError.__init__.__code__, 2)
    )
    assert [_streamed(r) for _ in range(3)] == [("reported", 1), b"m2", b"m3"]


@pytest.mark.usefixtures("sigusr1")
def test_a_second_interrupt_right_after_a_due_abort_sends_no_second_abort(
    streams: tuple[QueueWriter, LocalReader]
) -> None:
    w, r = streams
    w.enqueue(BIG["m0"], timeout=T)
    _cut_at_entry(lambda: w.enqueue(BIG["m1"], timeout=T), RunWriter._passed.__code__)
    _cut_at_entry(lambda: w.enqueue(BIG["m2"], timeout=T), RunWriter._end.__code__)
    w.enqueue(BIG["m3"], timeout=T)
    assert [_streamed(r) for _ in range(3)] == [b"m0", ("aborted", 1), b"m3"]


@pytest.mark.usefixtures("sigusr1")
def test_a_run_cut_right_after_its_first_publish_in_a_one_chunk_ring_is_aborted_next() -> None:
    """In a ring of one chunk the run's next chunk is the same chunk: its catch-up tells
    the publish by the chunk's written flag, not by the ring index (which comes back to
    it). Before, the due ABORT went out as part 0 and the reader broke for good."""
    w = MessageQueue(1, 1, [0], max_chunk_bytes=4096, max_chunks=1, large_objects="stream")
    r = MessageQueue.create_from_handle(w.export_handle(), 0)
    w.wait_until_ready(T)
    r.wait_until_ready(T)
    got: list[Any] = []

    def take() -> None:  # the one chunk needs a reader while the runs are written
        for _ in range(3):
            try:
                got.append(_streamed(r))
            except BrokenPeerError:  # closed: the writer's wait for it ends too
                got.append("broken")
                r.close()
                return

    reader = threading.Thread(target=take, daemon=True)
    reader.start()
    try:
        w.enqueue(BIG["m0"], timeout=T)
        _cut_at_entry(lambda: w.enqueue(BIG["m1"], timeout=T), RunWriter._passed.__code__)
        w.enqueue(BIG["m2"], timeout=T)
        reader.join(T)
        assert got == [b"m0", ("aborted", 1), b"m2"]
    finally:
        r.close()
        w.close()

