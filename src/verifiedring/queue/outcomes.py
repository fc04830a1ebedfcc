"""What a reader's call ends in, when it does not return the message.

* a message whose unpickling raised: its :class:`DecodeError`, naming this reader;
* one an interrupt cut after it was consumed: the interrupt now, and at the next
  dequeue (state OWED) its :class:`DecodeError` (the unpickling was cut) or the
  object (anything after its decode was: the decode site records it as owed with
  plain stores, where CPython delivers nothing, and ``dequeue`` clears the record
  the same way just before it returns), so no message is ever consumed unreported;
* a sequence number or kind out of place: :class:`BrokenPeerError`, for good (the
  spec's ``rpc = "broken"``);
* the writer's BROKEN: :class:`BrokenPeerError` with the writer's reason, for good
  (``"told"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import BrokenPeerError, DecodeError
from . import wire
from .lifecycle import CutDecode, Owed, ReaderLifecycle, ReaderState

if TYPE_CHECKING:
    import zmq

_IDLE = ReaderState.IDLE
_OWED = ReaderState.OWED
_FRAME_KINDS = (wire.OVERFLOW, wire.RUN_ABORT)  # a message's frame (ABORT: in a run's place)


class ReaderOutcomes:
    """A reader's errors, and the states they leave it in: one per reader end, held by
    the end and its path, over the end's lifecycle (its state, sequence number and owed
    record)."""

    __slots__ = ("_life", "_who", "broke", "writer")

    def __init__(self, life: ReaderLifecycle, who: Callable[[], str], writer: str) -> None:
        self._life = life
        self._who = who
        #: The writer, as errors name it.
        self.writer = writer
        #: Invariant: the writer's BROKEN (messages it sent, why) once seen, else None.
        self.broke: tuple[int, str] | None = None

    def who(self) -> str:
        """How messages name this reader."""
        return self._who()

    def told_broken(self) -> BrokenPeerError:
        """Broken for good, as the writer's BROKEN said (:attr:`_broke`): the error."""
        assert self.broke is not None
        total, why = self.broke
        missed = total - self._life.seq  # 0: BROKEN follows every message sent, on each channel
        lost = f"; {missed} of them never arrived" if missed > 0 else ""
        text = f"{self.writer} broke for good after sending {total} messages{lost} ({why})"
        self._life.enter(ReaderState.TOLD, text)
        return BrokenPeerError(f"{self._who()}: {text}")

    def out_of_order(self, where: str, kind: int, seq: int) -> BrokenPeerError:
        """Broken for good (the spec's ``rpc = "broken"``): the error to raise."""
        why = (f"on the {where} got {wire.kind_name(kind)} seq {seq}, expected message "
               f"seq {self._life.seq}: a message was lost or reordered")
        self.broken(why)
        return BrokenPeerError(f"{self._who()}: {why}")

    def failed(self, seq: int, exc: BaseException) -> DecodeError:
        """What the decode of message ``seq`` (consumed) delivered, as it raised
        ``exc``: its DecodeError, named; or, an interrupt (any exception a decode does
        not turn into DecodeError) having cut the unpickling, the DecodeError the
        next dequeue raises (a trace records it as this step's delivery)."""
        if isinstance(exc, DecodeError):
            owed = self.named(exc)  # raised now; owed until then (dequeue clears it)
        else:
            owed = self.named(DecodeError(
                seq, RuntimeError(f"its unpickling was interrupted by {type(exc).__name__}")
            ))
        self._life.owed = owed  # replaces the decode site's CUT_DECODE (state OWED)
        return owed

    def pay_owed(self) -> Any:
        """What an interrupt cut: the decoded object (recorded at its decode), or the
        DecodeError of a message whose unpickling it cut (:meth:`_failed`), raised. No
        call between the record's clear and the return or raise: a second interrupt
        lands before it (still owed) or after it (paid)."""
        # spec: ReaderPayOwed -- the record cleared with no call before the return or raise
        life = self._life
        owed = life.owed
        assert owed is not None
        if isinstance(owed, CutDecode):  # calls: before the clear (a cut leaves it owed)
            owed = self.named(DecodeError(life.seq - 1, RuntimeError(
                "an interrupt cut its unpickling or the report of its failure")))
        life.seen is None or life.saw(_IDLE)  # checked if watched
        if isinstance(owed, Owed):  # a call: before the clear, so a cut there leaves it owed
            obj = owed.obj
            owed.obj = None
            life.owed = None
            life.state = _IDLE
            return obj
        life.owed = None
        life.state = _IDLE
        raise owed

    def mark_receive(self) -> None:
        """Before a frame is taken off a socket: a mark still set is a receive that an
        interrupt cut between the take and the frame's keeping (it may have lost it)."""
        life = self._life
        if life.receiving:
            life.cut_receives += 1
        life.receiving = True

    def lost_frame(self, kind: int, seq: int, expected: int) -> DecodeError | None:
        """The frame of message ``seq`` came where ``expected``'s was due: if cut receives
        account for the gap (frames arrive in order), ``expected``'s frame was taken and
        lost, and this is its DecodeError (the message consumed: the sequence number moves
        past it); else ``None``, the frame is out of place."""
        life = self._life
        cut = life.cut_receives
        if kind not in _FRAME_KINDS or not expected < seq <= expected + cut:
            return None
        err = self.named(DecodeError(expected, RuntimeError(
            "an interrupt cut the receive that took its frame off the socket"
        )))
        life.cut_receives = cut - 1
        life.receiving = False
        life.seq = expected + 1
        return err

    def header(self, first: zmq.Frame) -> tuple[int, int, int, int]:
        """The header of a frame's first part; a malformed one is the writer's fault:
        :class:`BrokenPeerError` naming this reader."""
        if first.buffer.nbytes != wire.HEADER_BYTES:
            raise BrokenPeerError(
                f"{self._who()}: malformed header of {first.buffer.nbytes} bytes, expected "
                f"{wire.HEADER_BYTES}"
            )
        return wire.read_header(first.buffer)

    def load_frame(self, seq: int, frames: list[zmq.Frame]) -> Any:
        """The object of message ``seq``'s frame; a DecodeError names this reader."""
        try:
            return wire.load_frame(seq, [f.buffer for f in frames])
        except DecodeError as exc:
            raise self.named(exc) from exc.cause

    def named(self, exc: DecodeError) -> DecodeError:
        exc.receiver = self._who()
        return exc

    def broken(self, why: str) -> None:
        """Broken for good (the spec's ``rpc = "broken"``), for ``why``."""
        self._life.enter(ReaderState.BROKEN, why)
