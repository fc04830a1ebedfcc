"""The windows the enumeration still finds, by scenario and site (the occurrence
dropped): ``tests/test_interrupt_points.py`` fails on any violation not listed here.
The list only shrinks: a fix removes its sites. Empty: every window found is closed."""

KNOWN: frozenset[tuple[str, str]] = frozenset()
