"""Known bugs of the ring and the queue as patches the test suite must reject.

``catalog.toml`` lists them; ``run.py`` applies each to a copy of the
repository and runs the tests named to catch it (``python -m tests.mutants``,
``make mutants``). The TLA+ half of the same catalogue is each ``spec/`` family's
``mutants/`` and ``models.toml``'s ``Mut`` rows.
"""
