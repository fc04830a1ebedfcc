"""Every point where CPython can deliver an asynchronous exception during a library
call, tried one by one (``make interrupts``; ``tests/test_interrupt_points.py`` runs
a fixed sample of it).

A scenario (:mod:`.scenarios`) plays a few messages through a queue; its middle
phase runs under a profile hook (:mod:`.points`). Run once, the hook lists the
places CPython 3.11 can raise there: the entry of a function of ``verifiedring``
(or one it calls), and the return of a C call made by one. Then, for each place,
the scenario runs again in a fresh process (forked from a runner that imported
everything once) with KeyboardInterrupt raised exactly there, and the oracle
(:func:`.scenarios.judge`) checks every reader's deliveries afterwards.
"""
