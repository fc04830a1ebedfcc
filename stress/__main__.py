"""``python -m stress <kind> [options]``; with no kind, every kind runs in turn."""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from . import _progress, add_common_arguments, discover_kinds


def build_parser(kinds: dict[str, ModuleType]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m stress",
        description="Multiprocess soak tests. Without a kind, runs every kind with the "
        "options given (e.g. `python -m stress --duration 60`).",
    )
    sub = parser.add_subparsers(dest="kind", metavar="KIND")
    for name, module in kinds.items():
        doc = (module.__doc__ or name).strip().splitlines()[0]
        kind_parser = sub.add_parser(name, help=doc, description=module.__doc__)
        add_common_arguments(kind_parser)
        module.add_arguments(kind_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    kinds = discover_kinds()
    parser = build_parser(kinds)
    if argv[:1] and (not argv[0].startswith("-") or argv[0] in ("-h", "--help")):
        args = parser.parse_args(argv)
        return int(kinds[args.kind].main(args))
    status = 0
    for name, module in kinds.items():
        print(f"== stress {name} {' '.join(argv)}", flush=True)
        status |= int(module.main(parser.parse_args([name, *argv])))
    print(f"== stress summary\n{_progress.table()}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
