"""``verifiedring.dist``, the deprecated name of ``verifiedring.distributed``, still works."""

from __future__ import annotations

import subprocess
import sys

ALIAS_CHECK = """
import sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import verifiedring.dist as old
assert [w.category for w in caught] == [DeprecationWarning], caught
assert "verifiedring.distributed" in str(caught[0].message)
assert caught[0].filename == "<string>", caught[0].filename  # points at the importer
assert "torch" not in sys.modules, "importing the alias imported torch"

from verifiedring.dist.paths import collect
from verifiedring.dist.group import create_from_process_group
import verifiedring.dist.transfer
import verifiedring.distributed.group as group
import verifiedring.distributed.paths as paths
import verifiedring.distributed.transfer as transfer
import verifiedring.testing.launcher as launcher
import verifiedring.testing.samples as samples

assert collect is paths.collect and create_from_process_group is group.create_from_process_group
assert verifiedring.dist.transfer is transfer
assert sys.modules["verifiedring.dist.paths"] is paths
from verifiedring.dist import GroupBroadcaster, run_group
from verifiedring.distributed import GroupBroadcaster as new_broadcaster
assert GroupBroadcaster is new_broadcaster and run_group is launcher.run_group
from verifiedring.dist.testing import assert_mirrors
from verifiedring.dist.launch import run_group as old_run_group
assert assert_mirrors is samples.assert_mirrors and old_run_group is run_group
try:
    import verifiedring.dist.nonexistent
except ModuleNotFoundError:
    pass
else:
    raise AssertionError("a name that never existed imported")
print("ok")
"""


def test_old_name_warns_and_aliases_every_submodule() -> None:
    # A fresh interpreter: the warning fires once per process, at first import.
    out = subprocess.run(
        [sys.executable, "-c", ALIAS_CHECK], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
