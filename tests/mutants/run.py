#!/usr/bin/env python3
"""Known bugs, rejected by the test suite: apply each mutant of ``catalog.toml``, run its tests.

Usage (from the repository root)::

    python -m tests.mutants                 # baseline, then every mutant; one table
    python -m tests.mutants --only 'decode-*' --only hmac-skipped-remote
    python -m tests.mutants --list          # names, bug forms, tests
    python -m tests.mutants -j 2 -v         # two at a time, progress on stderr
    python -m tests.mutants --skip-baseline # CI: `make test` has just passed
    python -m tests.mutants --survivors     # also the survivors known on this CPU
    make mutants

(``python tests/mutants/run.py ...`` works too.)

For each mutant the runner copies the repository -- the files ``git ls-files``
lists (tracked, and untracked ones git does not ignore), plus the built
extension modules under ``src/`` -- to a temporary directory, applies the
mutant's search/replace patches there (each original snippet must occur
exactly once in its file, else the run stops before anything is tested:
the code drifted and the catalog must follow), and runs::

    python -m pytest -x -q -p no:cacheprovider -n 0 <the mutant's tests>

in the copy with ``PYTHONPATH=<copy>/src``, so the copy's code wins over the
editable install; before pytest it checks, by importing every module a patch
touched, that the module that runs is the copy's. A mutant is *caught* when
pytest reports a failing test (exit status 1). A collection or usage error
(status 2..5) is a broken mutant or test, never a catch; a run past the
mutant's ``timeout`` is a catch only for a mutant marked ``hang_is_caught``
(a liveness bug). The unmutated copy must first pass the union of every
selected mutant's tests (the baseline), else nothing else runs.

``--skip-baseline`` leaves the baseline out (for CI, right after a green
``make test`` of the same tree). A mutant whose ``survives_on`` lists this
machine's ``platform.machine()`` (the documented survivors of x86's memory
model) is not run unless ``--survivors`` is given; the table shows it as
skipped, with the reason.

Exit status: 0 when the baseline passes and every mutant is caught, except
those marked ``expected_survivor`` in the catalog (which say why); 1 when a
mutant survives or ends in an error; 2 when the catalog does not apply.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import fnmatch
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CATALOG = HERE / "catalog.toml"
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-n", "0", "-rfE"]
#: Built files the copy needs although git ignores them (the C fence).
BUILT_GLOBS = ("src/**/*.so", "src/**/*.pyd")
BASELINE_TIMEOUT = 300
_SUMMARY = re.compile(r"^(FAILED|ERROR) (\S+)")
_FAILURE_HEADER = re.compile(r"^_{3,} (.+?) _{3,}$")


class CatalogError(Exception):
    """The catalog does not describe the code as it is (or is malformed)."""


@dataclasses.dataclass(frozen=True)
class Patch:
    file: str
    original: str
    replacement: str


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    form: str
    patches: tuple[Patch, ...]
    tests: tuple[str, ...]
    timeout: float
    hang_is_caught: bool = False
    expected_survivor: bool = False
    why: str = ""
    spec: str = ""
    survives_on: tuple[str, ...] = ()


@dataclasses.dataclass
class Outcome:
    mutant: Mutant | None  # None: the baseline
    caught_by: str  # first failing test id, "SURVIVED", "passed", "TIMEOUT ...", "ERROR ..."
    seconds: float
    caught: bool
    ok: bool  # what the catalog expects (caught, or a documented survivor)
    log: str = ""
    skipped: bool = False  # not run: a survivor known on this machine (see survives_on)


# --- the catalog -------------------------------------------------------------


MUTANT_KEYS = frozenset({
    "name", "form", "spec", "file", "original", "replacement", "patch", "tests", "timeout",
    "hang_is_caught", "expected_survivor", "why", "survives_on",
})
PATCH_KEYS = frozenset({"file", "original", "replacement"})


def _patch(entry: dict[str, object], where: str) -> Patch:
    unknown = sorted(set(entry) - PATCH_KEYS)
    if unknown:
        raise CatalogError(
            f"{where}: unknown key(s) {unknown} in a patch (in TOML, keys written after a "
            "[[mutant.patch]] table belong to it: put the mutant's own keys first)"
        )
    missing = [k for k in ("file", "original", "replacement") if not isinstance(entry.get(k), str)]
    if missing:
        raise CatalogError(f"{where}: missing string field(s) {missing}")
    p = Patch(str(entry["file"]), str(entry["original"]), str(entry["replacement"]))
    if p.original == p.replacement:
        raise CatalogError(f"{where}: replacement equals the original snippet")
    if not p.original.strip():
        raise CatalogError(f"{where}: empty original snippet")
    return p


def _mutant(entry: dict[str, Any], where: str) -> Mutant:
    """One [[mutant]] entry, checked (its name already is)."""
    unknown = sorted(set(entry) - MUTANT_KEYS)
    if unknown:
        raise CatalogError(f"{where}: unknown key(s) {unknown}")
    if "patch" in entry:
        if any(k in entry for k in PATCH_KEYS):
            raise CatalogError(f"{where}: both [[mutant.patch]] tables and file/original")
        patches = tuple(
            _patch(p, f"{where} patch #{j + 1}") for j, p in enumerate(entry["patch"])
        )
    else:
        patches = (_patch({k: v for k, v in entry.items() if k in PATCH_KEYS}, where),)
    tests = entry.get("tests")
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise CatalogError(f"{where}: tests must be a non-empty list of test node ids")
    timeout = entry.get("timeout")
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise CatalogError(f"{where}: timeout must be a positive number of seconds")
    survivor = bool(entry.get("expected_survivor", False))
    why = str(entry.get("why", ""))
    if survivor and not why.strip():
        raise CatalogError(f"{where}: an expected survivor must say why")
    survives_on = entry.get("survives_on", [])
    if not isinstance(survives_on, list) or not all(isinstance(s, str) for s in survives_on):
        raise CatalogError(f"{where}: survives_on must be a list of platform.machine() names")
    if survives_on and not survivor:
        raise CatalogError(f"{where}: survives_on is for an expected_survivor")
    return Mutant(
        name=entry["name"], form=str(entry.get("form", "")), patches=patches,
        tests=tuple(tests), timeout=float(timeout),
        hang_is_caught=bool(entry.get("hang_is_caught", False)),
        expected_survivor=survivor, why=why, spec=str(entry.get("spec", "")),
        survives_on=tuple(survives_on),
    )


def load_catalog(path: Path = CATALOG) -> list[Mutant]:
    with path.open("rb") as f:
        data = tomllib.load(f)
    mutants: list[Mutant] = []
    seen: set[str] = set()
    for i, entry in enumerate(data.get("mutant", [])):
        name = entry.get("name")
        where = f"{path.name}: mutant #{i + 1} ({name!r})"
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
            raise CatalogError(f"{where}: name must be lower-case words joined by '-'")
        if name in seen:
            raise CatalogError(f"{where}: duplicate name")
        seen.add(name)
        mutants.append(_mutant(entry, where))
    if not mutants:
        raise CatalogError(f"{path}: no [[mutant]] entries")
    return mutants


def apply_patches(tree: Path, patches: tuple[Patch, ...]) -> None:
    """Apply each patch to ``tree``; raise :class:`CatalogError` unless each original
    snippet occurs exactly once in its file (as the file is after earlier patches)."""
    for p in patches:
        target = tree / p.file
        try:
            text = target.read_text()
        except FileNotFoundError:
            raise CatalogError(f"{p.file}: no such file") from None
        n = text.count(p.original)
        if n != 1:
            first = p.original.strip().splitlines()[0].strip()
            raise CatalogError(
                f"{p.file}: the original snippet (starting {first!r}) occurs {n} times, "
                "expected exactly once: the code changed; update the catalog"
            )
        target.write_text(text.replace(p.original, p.replacement, 1))


def check_catalog(mutants: list[Mutant]) -> list[str]:
    """Every mutant applies to the working tree as it is now (checked on a scratch copy
    of each file, never written back)."""
    problems = []
    for m in mutants:
        texts: dict[str, str] = {}
        for p in m.patches:
            if p.file not in texts:
                try:
                    texts[p.file] = (ROOT / p.file).read_text()
                except FileNotFoundError:
                    problems.append(f"{m.name}: {p.file}: no such file")
                    break
            n = texts[p.file].count(p.original)
            if n != 1:
                first = p.original.strip().splitlines()[0].strip()
                problems.append(
                    f"{m.name}: {p.file}: the original snippet (starting {first!r}) occurs "
                    f"{n} times, expected exactly once: the code changed; update the catalog"
                )
                break
            texts[p.file] = texts[p.file].replace(p.original, p.replacement, 1)
        for t in m.tests:
            if not (ROOT / t.split("::", 1)[0]).is_file():
                problems.append(f"{m.name}: test file of {t!r} does not exist")
    return problems


# --- copies and runs ------------------------------------------------------------


def repo_files() -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True,
    ).stdout.decode()
    files = [f for f in out.split("\0") if f]
    for pattern in BUILT_GLOBS:
        files.extend(str(p.relative_to(ROOT)) for p in ROOT.glob(pattern))
    return sorted({f for f in files if (ROOT / f).is_file() and not f.startswith(".git/")})


def make_base(dest: Path) -> None:
    for rel in repo_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target, follow_symlinks=False)


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree / "src")  # the copy's package, not the editable install
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _run(cmd: list[str], tree: Path, timeout: float) -> tuple[int | None, str]:
    """Run ``cmd`` in ``tree`` in its own process group; ``None`` status on timeout
    (then the whole group, spawned readers included, is killed)."""
    proc = subprocess.Popen(
        cmd, cwd=tree, env=_env(tree), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, text=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out
    finally:
        if proc.poll() is None:  # interrupted: leave nothing running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _module_of(path: str) -> str | None:
    if not path.startswith("src/") or not path.endswith((".py", ".c")):
        return None
    parts = path[len("src/") :].rsplit(".", 1)[0].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def build_extensions(tree: Path) -> None:
    """A mutant of a C module: the copy's extensions rebuilt in place from its sources
    (the copy's own ``.so``, which :func:`check_copy_runs` then finds imported)."""
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                   check=True, capture_output=True, timeout=BASELINE_TIMEOUT)


def check_copy_runs(tree: Path, files: list[str]) -> str | None:
    """The modules of ``files`` that Python imports in ``tree`` are the copy's files;
    a message saying otherwise, else ``None``."""
    modules = sorted({m for f in files if (m := _module_of(f)) is not None} | {"verifiedring"})
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    print(name, importlib.import_module(name).__file__)\n"
    )
    rc, out = _run([sys.executable, "-c", code], tree, 120)
    if rc != 0:
        return f"importing {modules} in the copy failed:\n{out}"
    src = (tree / "src").resolve()
    for line in out.splitlines():
        name, _, where = line.partition(" ")
        if not Path(where).resolve().is_relative_to(src):
            return f"{name} runs from {where}, not from the copy ({src}): PYTHONPATH lost"
    return None


def first_failure(out: str) -> str | None:
    """The first failing test id of pytest's short summary (``-rfE``); an error in a
    test's setup or teardown (``ERROR``) is marked as such."""
    for line in out.splitlines():
        m = _SUMMARY.match(line)
        if m:
            return m.group(2) + (" (error)" if m.group(1) == "ERROR" else "")
    return None


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[int | None, str]:
    return _run([sys.executable, "-m", "pytest", *PYTEST_ARGS, *tests], tree, timeout)


def run_baseline(base: Path, workdir: Path, mutants: list[Mutant]) -> Outcome:
    tree = workdir / "baseline"
    shutil.copytree(base, tree, symlinks=True)
    tests = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
    start = time.monotonic()
    problem = check_copy_runs(tree, [p.file for m in mutants for p in m.patches])
    if problem is not None:
        return Outcome(None, "ERROR: copy not in use", time.monotonic() - start, False, False,
                       problem)
    rc, out = run_tests(tree, tests, BASELINE_TIMEOUT)
    seconds = time.monotonic() - start
    if rc == 0:
        return Outcome(None, f"passed ({len(tests)} tests)", seconds, False, True, out)
    what = "TIMEOUT" if rc is None else f"FAILED {first_failure(out) or f'(exit {rc})'}"
    return Outcome(None, what, seconds, False, False, out)


def run_mutant(base: Path, workdir: Path, m: Mutant) -> Outcome:
    tree = workdir / m.name
    start = time.monotonic()
    try:
        shutil.copytree(base, tree, symlinks=True)
        apply_patches(tree, m.patches)
        if any(p.file.endswith(".c") for p in m.patches):
            build_extensions(tree)
        problem = check_copy_runs(tree, [p.file for p in m.patches])
        if problem is not None:
            return Outcome(m, "ERROR: copy not in use", time.monotonic() - start, False, False,
                           problem)
        rc, out = run_tests(tree, m.tests, m.timeout)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    seconds = time.monotonic() - start
    if rc is None:
        caught = m.hang_is_caught
        label = f"TIMEOUT after {m.timeout:g} s" + (" (hang: caught)" if caught else "")
        failed = [h.group(1) for line in out.splitlines() if (h := _FAILURE_HEADER.match(line))]
        if failed and not caught:  # a test failed, then the run hung (e.g. at exit)
            label += f", after {failed[0]} failed"
    elif rc == 0:
        caught, label = False, "SURVIVED"
    elif rc == 1:
        caught, label = True, first_failure(out) or "(exit 1, no failing test named)"
    else:
        caught, label = False, f"ERROR: pytest exit {rc} (collection/usage, not a catch)"
    if m.expected_survivor:
        ok = rc is not None and rc in (0, 1)
        label = (label + " (expected survivor)") if caught else "SURVIVED (expected: see why)"
    else:
        ok = caught
    return Outcome(m, label, seconds, caught, ok, out)


# --- the table -------------------------------------------------------------------


def print_table(outcomes: list[Outcome], total: float) -> None:
    rows = [("mutant", "caught by", "seconds")]
    for o in outcomes:
        name = "(baseline: unmutated)" if o.mutant is None else o.mutant.name
        mark = "" if o.ok else "  <-- !"
        rows.append((name, o.caught_by + mark, f"{o.seconds:.1f}"))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    line = f"+-{'-' * w0}-+-{'-' * w1}-+---------+"
    print(line)
    for i, (a, b, c) in enumerate(rows):
        print(f"| {a:<{w0}} | {b:<{w1}} | {c:>7} |")
        if i == 0:
            print(line)
    print(line)
    muts = [o for o in outcomes if o.mutant is not None and not o.skipped]
    skipped = len(outcomes) - len(muts) - sum(o.mutant is None for o in outcomes)
    caught = sum(o.caught for o in muts)
    expected = sum(1 for o in muts if o.mutant is not None and o.mutant.expected_survivor)
    bad = [o for o in outcomes if not o.ok]
    print(
        f"{caught}/{len(muts)} mutants caught, {expected} documented expected survivor(s) run, "
        f"{skipped} skipped (known survivors on {platform.machine()}: --survivors runs them), "
        f"{len(bad)} problem(s); total {total:.1f} s"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tests.mutants", description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[], metavar="GLOB",
                    help="run only mutants whose name matches (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="mutants run at a time (default 1)")
    ap.add_argument("-v", "--verbose", action="store_true", help="progress lines on stderr")
    ap.add_argument("--show", action="store_true",
                    help="after the table, the end of every mutant's pytest output (why it failed)")
    ap.add_argument("--skip-baseline", action="store_true",
                    help="do not run the unmutated baseline first (the suite just passed)")
    ap.add_argument("--survivors", action="store_true",
                    help="also run the mutants known to survive on this machine (survives_on)")
    ap.add_argument("--catalog", type=Path, default=CATALOG, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def skip_reason(m: Mutant, run_survivors: bool) -> str | None:
    """Why ``m`` is not run here, or None."""
    machine = platform.machine()
    if run_survivors or machine not in m.survives_on:
        return None
    return f"SKIPPED: survives on {machine} (expected survivor: see why; --survivors runs it)"


def run_selected(mutants: list[Mutant], args: argparse.Namespace) -> list[Outcome]:
    """The baseline (unless skipped), then every mutant not skipped, in catalog order."""
    skips = {m.name: r for m in mutants if (r := skip_reason(m, args.survivors)) is not None}
    run = [m for m in mutants if m.name not in skips]
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="vr-mutants-") as tmp:
        workdir = Path(tmp)
        base = workdir / "base"
        make_base(base)
        if run and not args.skip_baseline:  # (no tests at all would mean the whole suite)
            baseline = run_baseline(base, workdir, run)
            outcomes.append(baseline)
            if args.verbose:
                print(f"baseline: {baseline.caught_by} ({baseline.seconds:.1f} s)",
                      file=sys.stderr)
            if not baseline.ok:
                return outcomes
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = {m.name: pool.submit(run_mutant, base, workdir, m) for m in run}
            for i, m in enumerate(mutants):
                if m.name in skips:
                    outcomes.append(Outcome(m, skips[m.name], 0.0, False, True, skipped=True))
                    continue
                o = futures[m.name].result()
                outcomes.append(o)
                if args.verbose:
                    print(f"[{i + 1}/{len(mutants)}] {m.name}: {o.caught_by} "
                          f"({o.seconds:.1f} s)", file=sys.stderr)
    return outcomes


def print_list(mutants: list[Mutant]) -> None:
    for m in mutants:
        tag = " [expected survivor]" if m.expected_survivor else ""
        if m.survives_on:
            tag += f" [not run on {', '.join(m.survives_on)} without --survivors]"
        print(f"{m.name}{tag}: {m.form}\n    tests: {' '.join(m.tests)}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        mutants = load_catalog(args.catalog)
    except (CatalogError, tomllib.TOMLDecodeError) as exc:
        print(f"mutants: bad catalog: {exc}", file=sys.stderr)
        return 2
    if args.only:
        mutants = [m for m in mutants if any(fnmatch.fnmatch(m.name, g) for g in args.only)]
        if not mutants:
            print(f"mutants: nothing matches {args.only}", file=sys.stderr)
            return 2
    if args.list:
        print_list(mutants)
        return 0
    problems = check_catalog(mutants)
    if problems:
        print("mutants: the catalog does not apply to the code as it is:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 2

    start = time.monotonic()
    outcomes = run_selected(mutants, args)
    print_table(outcomes, time.monotonic() - start)
    bad = [o for o in outcomes if not o.ok]
    for o in outcomes if args.show else bad:
        name = "baseline" if o.mutant is None else o.mutant.name
        tail = "\n".join(o.log.rstrip().splitlines()[-40:])
        print(f"\n--- {name}: {o.caught_by}; last lines of its output ---\n{tail}")
    if outcomes and outcomes[0].mutant is None and not outcomes[0].ok:
        print("\nthe unmutated copy fails its tests: no mutant was run", file=sys.stderr)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
