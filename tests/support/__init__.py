"""Helpers only the tests need (what users may reuse is in :mod:`verifiedring.testing`).

Imported as ``support.<module>``: pytest puts ``tests/`` on ``sys.path`` for the
rootdir ``conftest.py`` (and ``pyproject.toml`` names it in ``pythonpath``), in
every xdist worker too. Test modules import from here, never from each other.
"""
