"""``python -m bench`` runs every bench (``readme`` last: it writes the README's table
from what the others wrote); ``python -m bench <name> [options]`` runs one."""

from __future__ import annotations

import argparse
import sys

from . import discover_benches


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
    for name in sorted(benches, key=lambda n: n == "readme"):  # stable: the rest in order
        module = benches[name]
        print(f"== bench {name}", flush=True)
        status |= int(module.main(parser.parse_args([name])))
    return status


if __name__ == "__main__":
    sys.exit(main())
