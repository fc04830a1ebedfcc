"""vLLM's own ``tests/distributed/test_shm_broadcast.py`` on verifiedring, its imports
switched and nothing else.

vLLM's file is not part of this repository: :func:`switched` rewrites its import block
(vLLM's ``shm_broadcast`` and ``shm_tensor_arena`` become ``verifiedring.compat``'s;
``StatelessProcessGroup``, ``get_open_port`` and ``update_environment_variables`` come
from this module), and :func:`write_suite` writes the result beside a ``conftest.py``
giving vLLM's ``caplog_vllm`` fixture; the stand-ins are :mod:`support.vllm_stand_ins`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

#: vLLM's import lines -> verifiedring's (each must occur in vLLM's file).
IMPORTS = {
    "from vllm.distributed.device_communicators import shm_broadcast, shm_tensor_arena":
        "from verifiedring.compat import tensor_arena as shm_tensor_arena\n"
        "from verifiedring.compat import vllm as shm_broadcast",
    "from vllm.distributed.device_communicators.shm_broadcast import (":
        "from verifiedring.compat.vllm import (",
    "from vllm.distributed.device_communicators.shm_tensor_arena import (":
        "from verifiedring.compat.tensor_arena import (",
    "from vllm.distributed.utils import StatelessProcessGroup":
        "from support.vllm_stand_ins import StatelessProcessGroup",
    "from vllm.utils.network_utils import get_open_port":
        "from support.vllm_stand_ins import get_open_port",
    "from vllm.utils.system_utils import update_environment_variables":
        "from support.vllm_stand_ins import update_environment_variables",
}
#: The imports inside test bodies (vLLM's module path, which install() leads here).
BODY_IMPORTS = ("from vllm.distributed.device_communicators import shm_broadcast",)
CONFTEST = '''
import pytest


@pytest.fixture
def caplog_vllm(caplog):
    """vLLM's fixture: the records of vLLM's loggers (here they propagate to the root)."""
    yield caplog
'''


def switched(source: str) -> str:
    """vLLM's test file with its import lines switched (each must occur once); any
    other line naming ``vllm.`` in an import is one of :data:`BODY_IMPORTS`."""
    for old, new in IMPORTS.items():
        count = source.count(old)
        if count != 1:
            raise ValueError(f"vLLM's test file has {count} lines {old!r}, expected one")
        source = source.replace(old, new)
    left = Counter(
        line.strip() for line in source.splitlines()
        if line.lstrip().startswith(("import vllm", "from vllm"))
    )
    unknown = sorted(set(left) - set(BODY_IMPORTS))
    if unknown:
        raise ValueError(f"vLLM's test file imports {unknown}: no stand-in for them")
    return source


def write_suite(vllm_test_file: Path, folder: Path) -> Path:
    """``folder/test_shm_broadcast.py`` (switched) and its ``conftest.py``; the file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conftest.py").write_text(CONFTEST)
    out = folder / "test_shm_broadcast.py"
    out.write_text(switched(vllm_test_file.read_text()))
    return out


