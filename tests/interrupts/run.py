"""The runner: list a scenario's points in one child, then try each in its own.

Children are forked from this process once it has imported everything a scenario
uses, so each starts fresh (no queue, no socket, no zmq context) and fast. Each is
bounded in time: one that overruns is killed and counted as a wedge.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import pkgutil
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import verifiedring.queue

from .points import Hook, Point, describe
from .scenarios import SCENARIOS, judge, play

CHILD_BOUND = 20.0  # seconds: a child past it is wedged
_fork = mp.get_context("fork")


def preload(names: Iterable[str]) -> None:
    """Import what the children would import on first use (and torch for the arena)."""
    for mod in pkgutil.walk_packages(verifiedring.queue.__path__, "verifiedring.queue."):
        importlib.import_module(mod.name)
    importlib.import_module("verifiedring.arena")
    if "arena" in names:
        importlib.import_module("torch")


#: What a child answers: the points its hook saw (the second hook's, if there is one),
#: whether its interrupt was raised, and the oracle's verdict.
Answer = tuple[list[Point], bool, str | None]


def _child(conn: Connection, name: str, target: Point | None, then: Point | None,
           again: int) -> None:
    try:
        hook = Hook(target, again=again)
        if SCENARIOS[name].second and target is not None:
            hook.second = Hook(then)
        p = play(SCENARIOS[name], hook)
        watched = hook if hook.second is None else hook.second
        hit = hook.hit and (then is None or watched.hit) and (not again or hook.hit_again)
        conn.send((watched.seen, hit, judge(p)))
    except BaseException as e:  # reported to the parent
        conn.send(([], False, f"the scenario itself raised {type(e).__name__}: {e}"))
    finally:
        conn.close()


@dataclass
class _Running:
    proc: Any
    conn: Connection
    point: tuple[Point | None, Point | None, int]
    started: float = field(default_factory=time.monotonic)


def _start(name: str, point: Point | None, then: Point | None = None,
           again: int = 0) -> _Running:
    recv, send = _fork.Pipe(duplex=False)
    proc = _fork.Process(target=_child, args=(send, name, point, then, again), daemon=True)
    proc.start()
    send.close()
    return _Running(proc, recv, (point, then, again))


def _finish(run: _Running) -> Answer:
    """The child's answer, or a wedge if it overran its bound."""
    left = CHILD_BOUND - (time.monotonic() - run.started)
    if run.conn.poll(max(left, 0.0)):
        try:
            answer: Answer = run.conn.recv()
        except EOFError:
            answer = ([], True, f"the child died (exit code {run.proc.exitcode})")
        run.proc.join(CHILD_BOUND)
    else:
        answer = ([], True, f"wedged: killed after {CHILD_BOUND:.0f} s")
    if run.proc.is_alive():
        run.proc.kill()
        run.proc.join()
    run.conn.close()
    return answer


@dataclass
class Result:
    """One scenario's enumeration: its points, those tried, reached and violated."""

    scenario: str
    points: int
    tried: int = 0
    missed: int = 0  # tried, but the run did not reach the point (a race's timing)
    violations: dict[str, str] = field(default_factory=dict)  # point -> what broke


def points_of(name: str) -> list[Point]:
    seen, _, verdict = _finish(_start(name, None))
    if verdict is not None:
        raise RuntimeError(f"{name}: the uninterrupted run fails the oracle: {verdict}")
    return seen


#: One try: the first point, a point of the cut end's next call, the entry (after the
#: first) of a second interrupt in the first one's handling (0: none).
Try = tuple[Point, Point | None, int]


def _run_all(name: str, todo: list[Try], jobs: int,
             result: Result) -> dict[Point, list[Point]]:
    """Each of ``todo`` in a fresh child, ``jobs`` at a time, into ``result``; the points
    the second hooks saw, by first point (a pair's count run: its second is None)."""
    seconds: dict[Point, list[Point]] = {}
    running: list[_Running] = []
    while todo or running:
        while todo and len(running) < jobs:
            running.append(_start(name, *todo.pop(0)))
        run = running.pop(0)
        seen, hit, verdict = _finish(run)
        first, then, again = run.point
        assert first is not None
        if SCENARIOS[name].second and then is None:
            seconds[first] = seen
        result.tried += 1
        if not hit:
            result.missed += 1
        if verdict is not None:
            where = describe(first) + ("" if then is None else f" then {describe(then)}") + (
                f" then again at entry {again}" if again else "")
            result.violations[where] = verdict
    return seconds


def enumerate_scenario(
    name: str, choose: Callable[[list[Point]], list[Point]], jobs: int
) -> Result:
    """Every point ``choose`` keeps, each in a fresh child, ``jobs`` at a time. A
    ``second`` scenario's points are pairs: each first point (alone, which lists the
    points of the cut end's next call), then with each of those ``choose`` keeps. A
    ``nested`` one's are each point with a second interrupt at each of the first
    ``nested`` library function entries after it."""
    points = points_of(name)
    result = Result(name, len(points))
    nested = SCENARIOS[name].nested
    agains = range(1, nested + 1) if nested else (0,)
    firsts: list[Try] = [(p, None, k) for p in choose(points) for k in agains]
    result.points *= len(agains)
    seconds = _run_all(name, firsts, jobs, result)
    pairs: list[Try] = [(p, q, 0) for p, qs in seconds.items() for q in choose(qs)]
    result.points += sum(len(qs) for qs in seconds.values())
    _run_all(name, pairs, jobs, result)
    return result


def every(stride: int) -> Callable[[list[Point]], list[Point]]:
    """A fixed sample: every ``stride``-th point, the first among them."""
    return lambda points: points[::stride]


def violations_at(name: str, first: str, jobs: int = 2) -> Result:
    """The point described ``first`` (without its line number: ``shm.py entry _turn
    #2``) tried alone, or in a ``second`` scenario with each point of the cut end's next
    call; a point that no longer exists is an error, so a renamed site fails loudly."""
    result = Result(name, 1)
    for p in points_of(name):
        if re.sub(r":\d+ ", " ", describe(p), count=1) == first:
            seconds = _run_all(name, [(p, None, 0)], jobs, result)
            pairs: list[Try] = [(p, q, 0) for q in seconds.get(p, [])]
            result.points += len(pairs)
            _run_all(name, pairs, jobs, result)
            return result
    raise LookupError(f"{name}: no point {first!r}")
