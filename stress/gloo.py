"""gloo: mixed object / tensor-dict / path-refill broadcasts over gloo on CPU, checked exactly.

2..4 ranks on this host; the MessageQueue's writer is the last rank by default
(not 0); tensor dicts come from random source ranks. See ``stress/_dist.py``.
"""

from __future__ import annotations

import argparse

from . import _dist


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _dist.add_arguments(parser, default_world=3)


def main(args: argparse.Namespace) -> int:
    return _dist.run(args, "gloo", backend="gloo", device="cpu")
