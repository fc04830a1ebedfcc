"""``python -m verifiedring cleanup [--dry-run]``: list and remove stale entries.

An entry is stale when the process that created it is gone (see
:mod:`verifiedring.leftovers`). Exit status 0; the entries are printed one a line.
"""

from __future__ import annotations

import argparse
import sys

from .leftovers import remove, stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verifiedring", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    clean = sub.add_parser("cleanup", help="list and remove entries of dead creators")
    clean.add_argument("--dry-run", action="store_true", help="list only, remove nothing")
    args = parser.parse_args(argv)
    entries = stale()
    for e in entries:
        done = "would remove" if args.dry_run else ("removed" if remove(e) else "gone")
        print(f"{done} {e.path} (creator pid {e.pid} is not running)")
    if not entries:
        print("nothing stale")
    return 0


if __name__ == "__main__":
    sys.exit(main())
