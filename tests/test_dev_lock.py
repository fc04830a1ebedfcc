"""requirements/dev.lock, what ``make install`` installs: exact pins, closed under
dependencies, agreeing with pyproject.toml's ``dev`` extra."""

from __future__ import annotations

import importlib.metadata as metadata
import re
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "dev.lock"
PIN = re.compile(r"^([A-Za-z0-9._-]+)==([A-Za-z0-9.+!_-]+)$")


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for n, line in enumerate(LOCK.read_text().splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        m = PIN.match(line)
        assert m, f"dev.lock:{n}: {line!r} is not NAME==VERSION"
        name = canonicalize_name(m[1])
        assert name not in pins, f"dev.lock:{n}: {m[1]} pinned twice"
        pins[name] = m[2]
    return pins


def _dev_extra() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in (*project["dependencies"],
                                     *project["optional-dependencies"]["dev"])]


def test_the_lock_pins_every_dev_requirement_exactly_within_its_range() -> None:
    pins = _pins()
    for req in _dev_extra():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} of the dev extra is not in dev.lock"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"dev.lock pins {req.name}=={pins[name]}, outside the dev extra's {req}")


def test_the_lock_holds_every_dependency_of_what_it_pins() -> None:
    """Closed: each pinned package installed at its pin needs only pinned packages."""
    pins = _pins()
    missing = []
    for name, version in pins.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version.split("+")[0] != version:
            continue  # another version installed here: its dependencies may differ
        for text in dist.requires or []:
            req = Requirement(text)
            needed = req.marker is None or req.marker.evaluate({"extra": ""})
            if needed and canonicalize_name(req.name) not in pins:
                missing.append(f"{name} needs {req}")
    assert missing == []
