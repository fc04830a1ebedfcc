"""The docs against the tree: a drift guard. Each failure lists every problem, by file
and line, and says which row or sentence to update.

1. CONTRIBUTING.md's layout table names every module of ``src/verifiedring`` and only
   paths that exist.
2. the action tables of spec/'s pages (its index, each family's README.md): every
   action is an action of a spec, and its
   ``# spec: <Action>`` site is in exactly the file its row names; every step of
   ``steps.py`` has a row; the code names in a row (``Class.member``, ``_private``) are
   defined in that file.
3. No timings in prose: figures (us, ms, s, GB/s, msg/s, 2.4x, ...) appear only in the
   README's results table (between its ``bench-results`` markers), which comes from
   ``bench/results/bench.json`` and the benches it names. A figure that is a setting,
   not a measurement, is in ``SETTINGS`` with its reason (and, where it is a
   constant of the code, the constant, whose value is checked).
4. No retired names (``MAC_BYTES``, ...) in the docs; every repository path and every
   ``Class.member`` they name in backticks exists.
5. CONTRIBUTING.md says what ``make lint`` covers, as ``pyproject.toml`` and the
   ``Makefile`` do.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib
from support.spec_names import ROOT, SRC, protocol_actions, site_files

from verifiedring import steps

README = ROOT / "README.md"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
SPEC_README = ROOT / "spec" / "README.md"
#: spec/'s index and its families' pages (the action tables are in these)
SPEC_PAGES = [SPEC_README, *sorted((ROOT / "spec").glob("*/README.md"))]
DOCS = [
    README, CONTRIBUTING, *SPEC_PAGES, ROOT / "bench" / "README.md", ROOT / "stress" / "README.md"
]
SPECS = [
    ROOT / "spec" / family / f"{name}.tla"
    for family, name in (("ring", "RingBuffer"), ("sleep", "ReaderSleep"),
                         ("queue", "MessageQueue"), ("arena", "TensorArena"),
                         ("sleep", "ReaderWake"))
]
#: The next-state relation of a spec whose is not ``Next``.
NEXT = {"ReaderWake.tla": "WakeNext"}

RESULTS_START = "<!-- bench-results:start"
RESULTS_END = "<!-- bench-results:end"


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def fail_if(problems: list[str], what: str) -> None:
    if problems:
        pytest.fail(f"{what} ({len(problems)}):\n  " + "\n  ".join(problems), pytrace=False)


# --- markdown tables ---------------------------------------------------------------


@dataclass
class Row:
    line: int  # 1-based line in the doc
    cells: list[str]


@dataclass
class Table:
    doc: Path
    heading: str  # the nearest heading above the table
    header: Row
    rows: list[Row]

    def where(self, row: Row) -> str:
        return f"{rel(self.doc)}:{row.line}"


def split_cells(line: str) -> list[str]:
    """``| a | `b | c` |`` -> ``["a", "`b | c`"]``: a ``|`` inside backticks is text."""
    cells, cell, code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
    return [*cells, cell.strip()]


def tables(doc: Path) -> list[Table]:
    found: list[Table] = []
    heading, block = "", []
    lines = doc.read_text().splitlines()
    for number, line in enumerate([*lines, ""], start=1):
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.lstrip().startswith("|"):
            block.append(Row(number, split_cells(line)))
            continue
        if len(block) >= 2 and set(block[1].cells[0]) <= set("-: "):
            found.append(Table(doc, heading, block[0], block[2:]))
        block = []
    return found


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


# --- 1. the layout table -------------------------------------------------------------

TOP_LEVEL = ("src/", "spec/", "tests/", "stress/", "bench/")


def layout_table() -> Table:
    for table in tables(CONTRIBUTING):
        if table.heading == "Layout" and table.header.cells[0] == "path":
            return table
    raise AssertionError(
        "CONTRIBUTING.md has no table under '## Layout' whose first column is 'path'"
    )


def row_paths(cell: str) -> list[str]:
    """The paths a layout row names: ``src/a/x.py``, ``y.py`` -> both under ``src/a/``."""
    paths: list[str] = []
    for span in code_spans(cell):
        if span.startswith(TOP_LEVEL):
            paths.append(span)
        elif paths:
            paths.append(str(Path(paths[0]).parent / span) + ("/" if span.endswith("/") else ""))
    return paths


def test_layout_table_lists_every_module_and_only_existing_paths() -> None:
    table = layout_table()
    problems: list[str] = []
    files: set[str] = set()
    folders: set[str] = set()
    for row in table.rows:
        paths = row_paths(row.cells[0])
        if not paths:
            problems.append(f"{table.where(row)}: the row names no path in its first column")
        for path in paths:
            if not (ROOT / path).exists():
                problems.append(
                    f"{table.where(row)}: `{path}` does not exist: update or remove that row"
                )
            (folders if path.endswith("/") else files).add(path.rstrip("/"))
    for module in sorted(rel(p) for p in SRC.rglob("*.py") if "__pycache__" not in p.parts):
        covered = module in files or any(module.startswith(f + "/") for f in folders)
        if not covered:
            problems.append(
                f"`{module}` is in no row of CONTRIBUTING.md's layout table: add a row "
                f"`| `{module}` | what it owns |` (or name it in the row of its neighbours)"
            )
    fail_if(problems, "CONTRIBUTING.md's layout table and src/ disagree")


def test_the_queue_packages_table_lists_each_of_its_modules() -> None:
    """``verifiedring.queue``'s docstring table names every module and subpackage of
    the package, and nothing else."""
    import verifiedring.queue as queue

    listed = set(re.findall(r"^``(\w+)``", queue.__doc__ or "", re.M))
    folder = SRC / "queue"
    there = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
    assert (sorted(there - listed), sorted(listed - there)) == ([], []), (
        "(modules missing from the table, rows for no module)")


# --- 2. the action tables of spec/'s pages --------------------------------------------

#: Actions that no code performs, by design: their rows name no code file.
NO_CODE_SITE = {
    "ReaderFlush": "ReaderSleep.tla's store buffer draining: the CPU's, relaxed memory only",
    "WriterFlush": "ReaderSleep.tla's store buffer draining: the CPU's, relaxed memory only",
    **dict.fromkeys(
        ["QueuePublish", "QueueAbort", "QueueTake", "QueueDecodeFail", "QueueClose", "QueueClosed"],
        "TensorArena.tla's abstraction of the queue: MessageQueue.tla's actions have the sites",
    ),
}


def action_tables() -> list[Table]:
    return [t for page in SPEC_PAGES for t in tables(page) if t.header.cells[0] == "action"]


def code_column(table: Table) -> tuple[int, str | None]:
    """The index of the table's code column and the path its header names (a file, or a
    folder ending in ``/``), if any."""
    for index, cell in enumerate(table.header.cells):
        if "code" in cell:
            paths = [s for s in code_spans(cell) if s.endswith((".py", "/"))]
            return index, paths[0] if paths else None
    raise AssertionError(
        f"{rel(table.doc)}:{table.header.line}: an action table without a 'code' column"
    )


def row_code_file(base: str | None, cell: str) -> str | None:
    """The file a row's code cell names: its first ``x.py`` (under the header's folder),
    else the header's file."""
    named = [s for s in code_spans(cell) if s.endswith(".py")]
    if named:
        first = named[0]
        if first.startswith("src/"):
            return first
        return (base if base and base.endswith("/") else "src/verifiedring/") + first
    return base if base and base.endswith(".py") else None


def action_row_problems(
    at: str, name: str, code: str | None, actions: Collection[str],
    sites: Mapping[str, set[str]],
) -> list[str]:
    """What is wrong with action ``name`` in the table row ``at`` whose code column
    names ``code``: no action of the specs, or not the file of its ``# spec:`` site."""
    problems: list[str] = []
    if name not in actions:
        problems.append(
            f"{at}: `{name}` is not an action of "
            f"{', '.join(s.name for s in SPECS)}: rename or remove that row"
        )
    if name in NO_CODE_SITE:
        return problems
    where = sites.get(name, set())
    if code is None:
        problems.append(
            f"{at}: `{name}`'s row names no code file "
            f"(its `# spec: {name}` site is in {sorted(where) or 'no file'})"
        )
    elif where != {code}:
        problems.append(
            f"{at}: `{name}`'s row names `{code}`, but its "
            f"`# spec: {name}` site is in {sorted(where) or 'no file of src/'}: "
            "update that row's code column"
        )
    return problems


def test_action_tables_name_each_actions_code_site() -> None:
    actions = {
        a: spec for spec in SPECS
        for a in protocol_actions(spec.read_text(), NEXT.get(spec.name, "Next"))
    }
    sites = {
        name: {rel(f) for f in files}
        for name, files in site_files(sorted(SRC.rglob("*.py"))).items()
    }
    problems: list[str] = []
    listed: set[str] = set()
    found = action_tables()
    if not found:
        problems.append("spec/'s pages have no table whose first column is 'action'")
    for table in found:
        column, base = code_column(table)
        for row in table.rows:
            names = [s for s in code_spans(row.cells[0]) if re.fullmatch(r"[A-Z]\w*", s)]
            if not names:
                problems.append(f"{table.where(row)}: the row names no action")
            code = row_code_file(base, row.cells[column])
            listed.update(names)
            for name in names:
                problems += action_row_problems(table.where(row), name, code, actions, sites)
    every_step = {
        *steps.ALL_STEPS, *steps.SLEEP_STEPS, *steps.QUEUE_STEPS, *steps.ARENA_STEPS,
        *steps.WAKE_STEPS,
    }
    for name in sorted(every_step - listed):
        problems.append(f"`{name}` (steps.py) has no row in spec/'s action tables")
    fail_if(problems, "spec/'s action tables and the code disagree")


def metaclass_members(tree: ast.AST) -> set[str]:
    """``Class.member`` for each member of a class's metaclass defined in the same tree."""
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    methods = {c.name: {f.name for f in c.body if isinstance(f, ast.FunctionDef)}
               for c in classes}
    return {f"{cls.name}.{m}" for cls in classes for k in cls.keywords
            if k.arg == "metaclass" and isinstance(k.value, ast.Name)
            for m in methods.get(k.value.id, ())}


def defined_names(path: Path) -> set[str]:
    """What ``path`` defines: functions and classes by name, and ``Class.member`` for
    methods, class attributes and ``self.<attr>`` stores in its classes (a metaclass's
    members, called on the class, for each class of the file built by it too)."""
    tree = ast.parse(path.read_text())
    names = metaclass_members(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if not isinstance(node, ast.ClassDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(f"{node.name}.{inner.name}")
            elif isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Store):
                if isinstance(inner.value, ast.Name) and inner.value.id == "self":
                    names.add(f"{node.name}.{inner.attr}")
            elif isinstance(inner, ast.Assign | ast.AnnAssign):
                targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
                names |= {f"{node.name}.{t.id}" for t in targets if isinstance(t, ast.Name)}
    return names


_FILE_NAME = re.compile(r".+\.(?:py|tla|cfg|toml|md|json|c|pyi)")
_CODE_NAME = re.compile(r"[A-Z]\w*\.\w+|_\w+")  # RunWriter._publish, _send_all


def test_action_tables_name_code_that_exists_in_the_named_file() -> None:
    problems: list[str] = []
    for table in action_tables():
        column, base = code_column(table)
        for row in table.rows:
            code = row_code_file(base, row.cells[column])
            if code is None or not (ROOT / code).is_file():
                continue  # reported by the test above
            names = defined_names(ROOT / code)
            for span in code_spans(row.cells[column]):
                if not _CODE_NAME.fullmatch(span) or _FILE_NAME.fullmatch(span):
                    continue
                if span not in names and not any(n.endswith("." + span) for n in names):
                    problems.append(
                        f"{table.where(row)}: `{span}` is not defined in `{code}`: update "
                        "that row's code column"
                    )
    fail_if(problems, "spec/'s action tables name code that is not there")


# --- 3. no timings in prose ----------------------------------------------------------

_NUMBER = r"~?\d[\d,.]*k?(?:\s*(?:-|/|\u2013)\s*\d[\d,.]*k?)*"  # 1.3, 97/131, 10-20, 177k
_UNIT = r"(?:µs|μs|us|ns|ms|s|sec|seconds?|minutes?|min|hours?|[GMK]i?B/s|msg/s|/s)"
TIMING = re.compile(rf"(?<![\w.]){_NUMBER}\s?{_UNIT}(?![\w/])|(?<![\w.])\d[\d.]*x(?!\w)")


@dataclass(frozen=True)
class Setting:
    """A figure in prose that is a setting, not a measurement."""

    doc: str  # path from the repository root
    phrase: str  # the text around the figure, verbatim
    reason: str
    constant: tuple[str, str, float] | None = None  # (module, name, value) it states


SETTINGS = [
    Setting("README.md", "a turn held past 10 s is", "the longest a create waits for its turn",
            ("verifiedring.shm", "TURN_WAIT", 10.0)),
    Setting("README.md", "interval be at least 0.001 s", "the least stall-log interval",
            ("verifiedring.queue.message_queue", "MIN_LOG_INTERVAL", 0.001)),
    Setting("README.md", "handshake within 2 s is dropped", "the writer's CURVE handshake bound",
            ("verifiedring.queue.curve", "HANDSHAKE_IVL_MS", 2000)),
    Setting("README.md", "a 1 ms spin, then the futex", "the reader's spin before it blocks",
            ("verifiedring.waiting", "SPIN_SECONDS", 1e-3)),
    Setting("README.md", "(default 1 s,", "vLLM's busy_loop_s default",
            ("verifiedring.compat.spin", "BUSY_LOOP_S", 1.0)),
    Setting("README.md", "**capped at 0.5 s**", "one idle block's bound: the dead-writer watch",
            ("verifiedring.compat.spin", "WATCH_BOUND", 0.5)),
    Setting("README.md", "(capped at 0.5 s, as above)", "the same bound",
            ("verifiedring.compat.spin", "WATCH_BOUND", 0.5)),
    Setting("README.md", "`linger` = 5 s", "close()'s default linger",
            ("verifiedring.queue.writer", "DEFAULT_LINGER", 5.0)),
    Setting("README.md", "its `linger` (5 s)", "close()'s default linger",
            ("verifiedring.queue.writer", "DEFAULT_LINGER", 5.0)),
    Setting("spec/sleep/README.md", "`waiting.SPIN_SECONDS`, 1 ms",
            "the reader's spin before it blocks",
            ("verifiedring.waiting", "SPIN_SECONDS", 1e-3)),
    Setting("spec/sleep/README.md", "`max_block` (5 s there)",
            "tests/test_reader_sleep.py's BOUND"),
    Setting("stress/README.md", "60 s each", "the example's --duration 60"),
    Setting("stress/README.md", "every 5 s", "--progress's default with --duration"),
    Setting("stress/README.md", "duration + 60 s", "--time-limit's default"),
    Setting("bench/README.md", "Target: <= 2x", "a target for the ratio, not a result"),
    Setting("README.md", "in blocks of at most 1 ms", "how often spin_until_readable looks "
            "at pending while asleep", ("verifiedring.queue.readiness", "PENDING_LOOK_SECONDS",
                                        1e-3)),
]


def results_table_lines(text: str) -> range:
    """Line numbers (1-based) of the README's results table, markers included."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines, 1) if line.startswith(RESULTS_START)]
    ends = [i for i, line in enumerate(lines, 1) if line.startswith(RESULTS_END)]
    if not (len(starts) == 1 and len(ends) == 1 and starts[0] < ends[0]):
        pytest.fail(
            f"README.md needs one `{RESULTS_START} ... -->` line before its results table and "
            f"one `{RESULTS_END} -->` after it (found starts {starts}, ends {ends})",
            pytrace=False,
        )
    return range(starts[0], ends[0] + 1)


def prose() -> list[tuple[str, int, str]]:
    """(doc, line, text) of every line of prose to check: the docs outside README's
    results table and the module docstrings of src/."""
    out: list[tuple[str, int, str]] = []
    for doc in DOCS:
        text = doc.read_text()
        skip = results_table_lines(text) if doc == README else range(0)
        out += [(rel(doc), n, line) for n, line in enumerate(text.splitlines(), 1) if n not in skip]
    for module in sorted(SRC.rglob("*.py")):
        tree = ast.parse(module.read_text())
        doc_node = tree.body[0] if tree.body else None
        if isinstance(doc_node, ast.Expr) and isinstance(doc_node.value, ast.Constant):
            first = doc_node.lineno
            for k, line in enumerate(str(doc_node.value.value).splitlines()):
                out.append((rel(module), first + k, line))
    return out


def _matches(entry: Setting, doc: str, line: str, figure: str) -> bool:
    if entry.doc != doc or entry.phrase not in line:
        return False
    start = line.index(entry.phrase)
    return figure in entry.phrase and line.find(figure, start) < start + len(entry.phrase)


def test_no_timings_in_prose() -> None:
    problems: list[str] = []
    used: set[Setting] = set()
    for doc, number, line in prose():
        for m in TIMING.finditer(line):
            known = [e for e in SETTINGS if _matches(e, doc, line, m.group())]
            used.update(known)
            if not known:
                problems.append(
                    f"{doc}:{number}: `{m.group()}` in `{line.strip()[:100]}`: a measurement "
                    "belongs in bench/results and the README's results table; a setting goes "
                    "in SETTINGS (tests/test_docs.py) with its reason"
                )
    for entry in SETTINGS:
        if entry not in used:
            problems.append(
                f"{entry.doc}: `{entry.phrase}` is gone: delete its entry in tests/test_docs.py"
            )
        if entry.constant:
            module, name, value = entry.constant
            try:
                actual = getattr(importlib.import_module(module), name, None)
            except ImportError:
                actual = f"no module {module}"
            if actual != value:
                problems.append(
                    f"{entry.doc}: `{entry.phrase}` states {module}.{name} = {value}, the code "
                    f"has {actual!r}: update the doc and its entry (or point the entry at the "
                    "constant's new home)"
                )
    fail_if(problems, "timings in prose")


def test_the_timing_pattern() -> None:
    found = [m.group() for m in TIMING.finditer(
        "24.6 µs, 97/131 µs, 0.26x vLLM, 1.02 GB/s, 177k msg/s, 2.5 us, ~2 s, 6 minutes, 40 ns"
    )]
    assert found == ["24.6 µs", "97/131 µs", "0.26x", "1.02 GB/s", "177k msg/s", "2.5 us",
                     "~2 s", "6 minutes", "40 ns"], found
    assert not TIMING.findall("0x7f, 64 MiB, 2 cores, 3 readers, R3C2, 2 \u00d7 2, FW1, v0.33.0")


# --- 4. retired names; paths that exist ---------------------------------------------

#: Names the code no longer has, and what took their place.
RETIRED = {
    "MAC_BYTES": "remote frames carry no MAC part: CurveZMQ authenticates them (queue/curve.py)",
    "MAC part": "remote frames carry no MAC part: CurveZMQ authenticates them (queue/curve.py)",
    "frame authentication": "CurveZMQ authenticates the remote channel (queue/curve.py)",
    "_was_framed": "the FRAMED kind is gone: an overflow marker",
    "_marker_is_framed": "the FRAMED kind is gone: an overflow marker",
    "FRAMED": "the kind is OVERFLOW",
}

_PATH = re.compile(r"[\w.*-]+(?:/[\w.*-]+)+/?|[\w-]+/")
_REPO_SUFFIXES = (".py", ".tla", ".cfg", ".toml", ".md", ".c", ".pyi", ".json", "/")


def named_paths(doc: Path) -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        for span in code_spans(line):
            placeholder = any(part.isupper() for part in span.split("/"))  # DIR/bench.json
            if _PATH.fullmatch(span) and span.endswith(_REPO_SUFFIXES) and not placeholder:
                out.append((number, span))
    return out


def resolves(doc: Path, span: str) -> bool:
    """A path in a doc is from the repository root, the doc's folder, the package or
    its ``queue/`` (``writer.py``-style tables name files under ``queue/``)."""
    bases = [ROOT, doc.parent, SRC, SRC / "queue", ROOT / "tests"]
    return any(any(base.glob(span.rstrip("/"))) for base in bases)


def test_docs_name_no_retired_names_and_only_paths_that_exist() -> None:
    python = [p for top in TOP_LEVEL for p in (ROOT / top).rglob("*.py")]
    members = {n for p in python for n in defined_names(p) if "." in n}
    problems: list[str] = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for name, instead in RETIRED.items():
                if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", line):
                    problems.append(f"{rel(doc)}:{number}: `{name}` no longer exists: {instead}")
        for number, span in named_paths(doc):
            if not resolves(doc, span):
                problems.append(f"{rel(doc)}:{number}: `{span}` does not exist: update the path")
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for span in code_spans(line):
                member = re.fullmatch(r"[A-Z]\w*\.\w+", span)
                if member and not _FILE_NAME.fullmatch(span) and span not in members:
                    problems.append(
                        f"{rel(doc)}:{number}: `{span}`: no class of the repository defines "
                        "that member: update the name"
                    )
    fail_if(problems, "stale names in the docs")


# --- 5. what make lint covers ------------------------------------------------------


def test_contributing_says_what_lint_covers() -> None:
    mypy_files = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"])
    makefile = (ROOT / "Makefile").read_text()
    ruff = re.search(r"-m ruff check (.+)", makefile)
    assert ruff, "the Makefile's lint target no longer runs `ruff check PATHS`"
    ruff_paths = set(ruff.group(1).split())
    problems: list[str] = []
    lines = CONTRIBUTING.read_text().splitlines()
    claims = (("`mypy` covers", mypy_files), ("`ruff check` covers", ruff_paths))
    for tool, expected in claims:
        said = [(n, line) for n, line in enumerate(lines, 1) if tool in line]
        if len(said) != 1:
            problems.append(f"CONTRIBUTING.md: no one line saying '{tool} ...' (found {len(said)})")
            continue
        number, line = said[0]
        named = {s.rstrip("/") for s in code_spans(line.split(tool, 1)[1].split(";")[0])}
        if named != expected:
            problems.append(
                f"CONTRIBUTING.md:{number}: says {tool} {sorted(named)}, the tools' config says "
                f"{sorted(expected)}: update that line"
            )
    fail_if(problems, "CONTRIBUTING.md and make lint disagree")
