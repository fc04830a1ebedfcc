"""``python -m bench`` runs every bench (``plots`` then ``readme`` last: they draw the
PNGs and write the README's table from what the others wrote); ``python -m bench <name>
[options]`` runs one."""

from __future__ import annotations

import argparse
import sys

from . import discover_benches

#: The benches run after the others (in this order; the rest keep theirs): from their JSON.
LAST = ("plots", "readme")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    benches = discover_benches()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = parser.add_subparsers(dest="bench", metavar="BENCH")
    for name, module in benches.items():
        doc = (module.__doc__ or name).strip().splitlines()[0]
        module.add_arguments(sub.add_parser(name, help=doc, description=module.__doc__))
    if argv:
        args = parser.parse_args(argv)
        return int(benches[args.bench].main(args))
    status = 0
    for name in sorted(benches, key=lambda n: LAST.index(n) + 1 if n in LAST else 0):
        module = benches[name]
        print(f"== bench {name}", flush=True)
        status |= int(module.main(parser.parse_args([name])))
    return status


if __name__ == "__main__":
    sys.exit(main())
