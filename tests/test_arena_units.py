"""The tensor arena's rules one at a time, in this process: which slot a tensor takes,
which stubs a reader refuses and with what words, when a slot is released, and the
reader's thread-local state (mutants nobody chose, tests/mutation/REPORT.md: each of
these survived a mutant of ``arena.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from support.arenas import MIB, ArenaGroup, T, arena_groups, pattern
from support.unpicklable import FailsToLoad

from verifiedring import DecodeError, MisuseError
from verifiedring.arena import ArenaReader, ArenaWriter, _rebuild_arena
from verifiedring.compat.tensor_arena import ShmTensorArena, facade_of
from verifiedring.engine import EnginePolicy, set_engine_policy


@pytest.fixture
def arenas() -> Iterator[Callable[..., ArenaGroup]]:
    yield from arena_groups()


def _owed(a: ArenaReader) -> list[int]:
    """This reader's owes byte of every slot, in slot order."""
    return [bytes(a.owes(s))[a.index] for s in range(a.handle.n_slots)]


def test_views_rebuilt_over_one_claim_share_one_base_and_release_it_once(arenas: Any) -> None:
    """A second stub of the same claim views the live base: the slot stays owed until
    the last view of either dies, whichever dies first."""
    g = arenas(1, arena_slots=1)
    g.writer.enqueue([FailsToLoad(), pattern(0, 2 * MIB)], timeout=T)  # claim 1, no view
    with pytest.raises(DecodeError):
        g.readers[0].dequeue(T)
    g.writer.enqueue("tick", timeout=T)
    assert g.readers[0].dequeue(T) == "tick"  # its sweep released claim 1
    g.writer.enqueue(pattern(1, 2 * MIB), timeout=T)
    t = g.readers[0].dequeue(T)
    a = g.reader_arena(0)
    _, gen = a.seq_gen(0)
    assert gen == 2  # this reader's first base: claim and base numbers differ
    again = a.rebuild(0, gen, a.offset(0), 8 * MIB, "int32", (2 * MIB,))
    assert torch.equal(again, t)
    del again  # t still views the slot
    assert _owed(a) == [1] and list(a.viewed) == [0]
    del t
    assert _owed(a) == [0] and not a.viewed


def test_a_freed_slot_is_listed_once_until_it_is_viewed_again_or_forgotten(
    arenas: Any,
) -> None:
    g = arenas(1, arena_slots=1)
    g.writer.enqueue(pattern(1, 2 * MIB), timeout=T)
    t = g.readers[0].dequeue(T)
    a = g.reader_arena(0)
    assert (list(a.freed), list(a.viewed)) == ([], [0])
    del t
    assert (_owed(a), list(a.freed), a.viewed) == ([0], [0], {})
    g.writer.enqueue(pattern(2, 2 * MIB), timeout=T)  # the same slot, claimed again
    t = g.readers[0].dequeue(T)
    assert (list(a.freed), list(a.viewed)) == ([], [0])  # viewed again: not freed
    del t
    assert list(a.freed) == [0]
    a.forget_freed()
    assert (_owed(a), list(a.freed)) == ([0], [])


def test_slots_are_taken_round_robin_and_the_probe_goes_forward(arenas: Any) -> None:
    g = arenas(1, arena_slots=4, arena_slot_bytes=8 * MIB)
    r, a = g.readers[0], g.reader_arena(0)
    kept = []
    for m in range(4):
        g.writer.enqueue(pattern(m, 2 * MIB), timeout=T)
        kept.append(r.dequeue(T))
        assert list(a.viewed) == list(range(m + 1))  # message m in slot m
    kept[1] = kept[3] = None  # slots 1 and 3 released; 0 and 2 viewed
    assert _owed(a) == [1, 0, 1, 0]
    g.writer.enqueue(pattern(4, 2 * MIB), timeout=T)  # the next slot is 0: busy
    kept.append(r.dequeue(T))
    assert sorted(a.viewed) == [0, 1, 2]  # forward from 0: slot 1, not 3
    assert torch.equal(kept[4], pattern(4, 2 * MIB))
    assert (g.arena.copies, g.arena.fallbacks) == (5, 0)


def test_a_message_never_takes_a_slot_it_claimed_itself(arenas: Any) -> None:
    """Two tensors of one message, one free slot: the second falls back out of band
    rather than overwriting the first."""
    g = arenas(1, arena_slots=2, arena_slot_bytes=8 * MIB)
    r = g.readers[0]
    g.writer.enqueue(pattern(0, 2 * MIB), timeout=T)
    first = r.dequeue(T)  # slot 0, viewed
    g.writer.enqueue([pattern(1, 2 * MIB), pattern(2, 2 * MIB)], timeout=T)
    got = r.dequeue(T)
    assert torch.equal(got[0], pattern(1, 2 * MIB)) and torch.equal(got[1], pattern(2, 2 * MIB))
    assert (g.arena.copies, g.arena.fallbacks) == (2, 1)
    g.writer.enqueue(pattern(3, 2 * MIB), timeout=T)
    g.writer.enqueue(pattern(4, 2 * MIB), timeout=T)
    assert (g.arena.copies, g.arena.fallbacks) == (2, 3)  # counted one by one
    assert torch.equal(first, pattern(0, 2 * MIB))


def test_a_tensor_filling_its_slot_leaves_the_owes_bytes_alone(arenas: Any) -> None:
    g = arenas(1, arena_slots=1, arena_slot_bytes=8 * MIB)
    t = torch.zeros(8 * MIB, dtype=torch.uint8)
    t[: 1 << 16] = 7  # its last bytes are 0, as an owes byte released
    g.writer.enqueue(t, timeout=T)
    got = g.readers[0].dequeue(T)
    assert torch.equal(got, t) and _owed(g.reader_arena(0)) == [1]


def test_close_releases_an_owed_slot_after_a_released_one(arenas: Any) -> None:
    g = arenas(1, arena_slots=2, arena_slot_bytes=8 * MIB)
    g.writer.enqueue(pattern(1, 2 * MIB), timeout=T)
    g.writer.enqueue(pattern(2, 2 * MIB), timeout=T)
    r, a = g.readers[0], g.reader_arena(0)
    del_me = r.dequeue(T)
    del del_me  # slot 0 released; message 2 (slot 1) never read
    assert _owed(a) == [0, 1]
    r.close()  # unmapped (nothing viewed): the writer's mapping shows the bytes
    assert [bytes(g.arena.owes(s))[0] for s in range(2)] == [0, 0]


def _stub(a: ArenaReader, **change: Any) -> dict[str, Any]:
    """The stub of slot 0's claim as the writer made it, with ``change`` applied."""
    stub = {"slot": 0, "gen": a.seq_gen(0)[1], "offset": a.offset(0), "nbytes": 8 * MIB,
            "dtype": "int32", "shape": (2 * MIB,)}
    return {**stub, **change}


@pytest.mark.parametrize(
    "change",
    [{"slot": -1}, {"slot": 2, "offset": None}, {"offset": 64}, {"nbytes": 16 * MIB + 1},
     {"slot": 2, "nbytes": 1}],
    ids=["negative-slot", "slot-past-the-end", "wrong-offset", "too-long", "bad-slot-short"],
)
def test_a_stub_that_does_not_fit_the_arena_is_refused_with_its_fields(
    arenas: Any, change: dict[str, Any]
) -> None:
    g = arenas(1, arena_slots=2)
    g.writer.enqueue(pattern(1, 2 * MIB), timeout=T)
    t = g.readers[0].dequeue(T)
    a = g.reader_arena(0)
    if change.get("offset", 0) is None:
        change["offset"] = a.offset(change["slot"])  # where a slot 2 would lie
    stub = _stub(a, **change)
    with pytest.raises(ValueError) as info:
        a.rebuild(**stub)
    assert str(info.value) == (
        f"arena stub slot {stub['slot']} offset {stub['offset']} nbytes {stub['nbytes']} "
        f"does not fit arena {a.handle.name!r} (2 x {16 * MIB} bytes)"
    )
    whole = a.rebuild(**_stub(a, nbytes=16 * MIB, shape=(4 * MIB,)))  # a whole slot fits
    assert torch.equal(whole[: 2 * MIB], t)


def test_a_stub_of_an_older_claim_names_both_claims(arenas: Any) -> None:
    g = arenas(1, arena_slots=1)
    g.writer.enqueue(pattern(1, 2 * MIB), timeout=T)
    g.readers[0].dequeue(T)
    a = g.reader_arena(0)
    seq, gen = a.seq_gen(0)
    with pytest.raises(ValueError) as info:
        a.rebuild(**_stub(a, gen=gen - 1))
    assert str(info.value) == (
        f"arena {a.handle.name!r} slot 0 holds claim {gen} (message seq {seq}), the stub "
        f"expects claim {gen - 1}: the slot was reused"
    )


def _outside(name: str) -> str:
    return (f"tensor arena {name!r}: its stub was unpickled outside a dequeue of that "
            "arena's local reader")


def test_a_stub_unpickled_outside_a_dequeue_is_refused_in_every_thread(arenas: Any) -> None:
    g = arenas(2, arena_slots=1)
    g.writer.enqueue(pattern(1, 2 * MIB), timeout=T)
    kept = [r.dequeue(T) for r in g.readers]  # reader 1's dequeue ran last here
    a0, a1 = g.reader_arena(0), g.reader_arena(1)
    stub = _stub(a1)
    args = (a1.handle.name, *stub.values())
    closing: list[BaseException] = []

    def close_elsewhere() -> None:  # a thread where no dequeue ever ran
        try:
            g.readers[0].close()
        except BaseException as exc:
            closing.append(exc)

    closer = threading.Thread(target=close_elsewhere)
    closer.start()
    closer.join(T)
    assert closing == []
    g.readers[0].close()  # here too: not the current reader, reader 1 stays current
    again = _rebuild_arena(*args)
    assert torch.equal(again, kept[1])
    errors: list[str] = []

    def elsewhere() -> None:  # a thread where no dequeue ever ran
        try:
            _rebuild_arena(*args)
        except ValueError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(T)
    assert errors == [_outside(a1.handle.name)]
    g.readers[1].close()  # the current reader: no longer current
    with pytest.raises(ValueError) as info:
        _rebuild_arena(*args)
    assert str(info.value) == _outside(a1.handle.name)
    assert a0.handle.name == a1.handle.name


def test_arena_sizes_are_checked_by_name() -> None:
    for kw, words in (({"n_slots": "2"}, "tensor arena n_slots must be an int >= 1, got '2'"),
                      ({"slot_bytes": 0}, "tensor arena slot_bytes must be an int >= 1, got 0")):
        with pytest.raises(MisuseError) as info:
            ArenaWriter(1, lambda: 0, **kw)
        assert str(info.value) == words


def test_a_reader_attaching_is_announced_and_has_one_facade(arenas: Any) -> None:
    seen: list[ArenaReader] = []
    old = set_engine_policy(EnginePolicy(arena_attach=seen.append))
    try:
        g = arenas(2, arena_slots=1)  # each local reader attaches with the default
    finally:
        set_engine_policy(old)
    assert seen == [g.reader_arena(0), g.reader_arena(1)]
    facade = facade_of(g.reader_arena(0))
    assert isinstance(facade, ShmTensorArena) and facade_of(g.reader_arena(0)) is facade
