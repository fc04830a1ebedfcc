"""A local reader's watch on its writer: the kernel, not a poll, says the writer went.

A local reader that sleeps on the ring must still learn at once that its writer
died, without waking to look. Its socket to the writer (an ipc connection) is
closed by the kernel when the writer's process exits, however it exits; libzmq
reports that as a ``DISCONNECTED`` event on a monitor of the reader's socket.
:class:`WriterWatch` runs one thread per reader, blocked in ``zmq.poll`` on that
monitor and on a stop socket (no timeout: it costs nothing while nothing happens).
On each event it calls ``on_lost`` (the reader's: look at the socket and the writer
now), then cuts the reader's sleep
(:meth:`~verifiedring.cursor_base.ReaderSide.cut_sleep`: the word cleared, then a
futex wake); the woken reader then checks that the writer still holds its ring, as
its watch always did, and names a writer that has gone. A disconnect that is not a
death (the writer closed its socket) costs one spurious wake.

The thread touches shared memory only through the cut; it owns its
two sockets from its start until it ends, closes them itself as it ends, and
:meth:`close` ends it before the reader's ring is unmapped. No other thread closes
a socket the watch may be polling: a close whose join runs out leaves them to the
thread. Its poll is bounded (``POLL_BOUND_MS``) and it stops at a flag as well as
at the stop socket. A reader left open at exit (vLLM's workers leave theirs) has
its watch ended by an ``atexit`` hook, before the interpreter tears anything
down: no watch thread sits in ``zmq_poll`` then (the candidate cause of a teardown
segfault in ``zmq_poll`` seen in engine runs).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import zmq

from ..ring import ReaderCursor
from ..waiting import MAX_IDLE_BLOCK

#: How long close() waits for the thread to end (it ends as soon as it is told).
JOIN_TIMEOUT = 5.0
#: The longest one poll of the thread lasts: then it looks at its stop flag (a stop
#: message that never arrived cannot keep it in zmq_poll).
POLL_BOUND_MS = 1000
#: An idle reader's longest block while its watch runs: a writer gone is told by the
#: watch, a frame to read by the writer's wake; what is left to look for is rare.
WATCHED_IDLE_BLOCK = 10.0

_names = itertools.count()
#: The watches whose thread may run, ended at exit (:func:`_end_all`); a forked child
#: has none (their threads were not copied, their sockets are the parent's).
_live: weakref.WeakSet[WriterWatch] = weakref.WeakSet()
os.register_at_fork(after_in_child=_live.clear)


def watch_writer(
    ctx: zmq.Context[Any], sock: zmq.Socket[Any], cursor: ReaderCursor,
    on_lost: Callable[[], None], who: str,
) -> WriterWatch | None:
    """A watch for reader ``who`` if it blocks on its futex, its idle blocks made long
    (``WATCHED_IDLE_BLOCK``); ``None`` for one that does not block."""
    if cursor.sleeper is None:
        return None
    watch = WriterWatch(ctx, sock, cursor, on_lost, f"verifiedring watch of {who}")
    cursor.max_idle_block = WATCHED_IDLE_BLOCK
    return watch


class WriterWatch:
    """Calls ``on_lost()`` from its own thread each time ``sock``'s connection to the
    writer closes, until :meth:`close`. ``on_lost``, a bound method, is held weakly:
    the watch keeps nothing alive (a reader dropped without ``close()`` is freed, and
    its finalizer closes the watch)."""

    def __init__(
        self, ctx: zmq.Context[Any], sock: zmq.Socket[Any], cursor: ReaderCursor,
        on_lost: Callable[[], None], name: str,
    ) -> None:
        address = f"inproc://verifiedring-watch-{os.getpid()}-{next(_names)}"
        self._sock = sock
        self._cursor = cursor
        self._on_lost = weakref.WeakMethod(on_lost)
        sock.monitor(address, zmq.EVENT_DISCONNECTED)
        self._events = ctx.socket(zmq.PAIR)
        self._stop_in = ctx.socket(zmq.PAIR)
        self._stop_out = ctx.socket(zmq.PAIR)
        self._stopping = threading.Event()
        try:
            self._events.connect(address)
            self._stop_in.bind(address + "-stop")
            self._stop_out.connect(address + "-stop")
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()
        except BaseException:
            self._close_sockets(self._events, self._stop_in, self._stop_out)
            raise
        _live.add(self)

    def _run(self) -> None:
        try:
            self._watch()
        finally:  # the thread's own sockets, closed by the only thread that polls them
            self._close_sockets(self._events, self._stop_in)

    def _watch(self) -> None:
        poller = zmq.Poller()
        poller.register(self._events, zmq.POLLIN)
        poller.register(self._stop_in, zmq.POLLIN)
        while not self._stopping.is_set():
            ready = dict(poller.poll(POLL_BOUND_MS))
            if self._stop_in in ready:
                return
            if self._events in ready:
                self._events.recv_multipart()  # the event's frames: which, and where
                on_lost = self._on_lost()  # held: the reader stays alive through the cut
                if on_lost is None or self._stopping.is_set():
                    return  # the reader is gone, or was dropped and closed the watch
                self._cursor.cut_sleep(on_lost)  # what the woken reader looks at, first
                del on_lost

    def holds(self) -> bool:
        """Whether the thread runs; if not (a child forked since it started), the
        cursor's idle blocks are short again (``MAX_IDLE_BLOCK``)."""
        if self._thread.is_alive():
            return True
        self._cursor.max_idle_block = MAX_IDLE_BLOCK
        return False

    def close(self) -> None:
        """End the thread, stop the monitor and close the watch's sockets (a thread that
        runs closes its own as it ends). Idempotent."""
        if self._stop_out.closed:
            return
        _live.discard(self)
        # first, while the thread's end of the monitor is still open: an event the
        # reader's socket emits meanwhile is sent to that end, and such a send blocks
        # (for good) once no peer is connected
        self._sock.disable_monitor()
        self._stopping.set()
        if self._thread.is_alive():
            # the thread may end by the flag just now, closing its end: no peer, Again
            with contextlib.suppress(zmq.Again):
                self._stop_out.send(b"", zmq.NOBLOCK)
            if threading.current_thread() is not self._thread:  # not from its on_lost
                self._thread.join(JOIN_TIMEOUT)
        if not self._thread.is_alive():  # it closed its own, or never ran here (a fork)
            self._close_sockets(self._events, self._stop_in)
        self._close_sockets(self._stop_out)

    @staticmethod
    def _close_sockets(*sockets: zmq.Socket[Any]) -> None:
        for s in sockets:
            s.close(linger=0)


@atexit.register
def _end_all() -> None:
    """End every watch still running, before the interpreter's teardown (zmq's own
    ``atexit`` hook, registered earlier, runs after this one)."""
    for watch in list(_live):
        watch.close()
