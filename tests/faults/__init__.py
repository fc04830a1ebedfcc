"""Fault injection, each case in its own namespaces (verifiedring.testing.namespaces).

Every case runs a driver function of :mod:`faults.drivers` inside fresh mount,
network, UTS, IPC and PID namespaces with a private /dev/shm tmpfs of a chosen
size and a private TMPDIR: what it leaves there is its own, a full /dev/shm
cannot touch the host, and the TCP ports it opens are reachable from nowhere
else. The driver returns its observations; the test asserts them.
"""
