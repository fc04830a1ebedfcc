"""verifiedring.distributed pieces that need no process group."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, cast

import pytest

torch = pytest.importorskip("torch")

from verifiedring.distributed.transfer import TensorMeta, TransferOptions, plan_buckets  # noqa: E402
from verifiedring.hosts import (  # noqa: E402
    CONNECT_IP_ENV,
    HOST_ID_ENV,
    host_identity,
    writer_connect_ip,
)


def test_importing_verifiedring_distributed_and_testing_does_not_import_torch() -> None:
    code = (
        "import sys, verifiedring, verifiedring.distributed\n"
        "import verifiedring.testing.launcher, verifiedring.testing.probe\n"
        "import verifiedring.testing.samples, verifiedring.testing.scheduler\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert 'zmq' not in sys.modules, 'zmq imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_host_identity_and_connect_ip_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HOST_ID_ENV, raising=False)
    assert host_identity() == host_identity() != ""
    monkeypatch.setenv(HOST_ID_ENV, "node-7")
    assert host_identity() == "node-7"
    monkeypatch.setenv(CONNECT_IP_ENV, "10.1.2.3")
    assert writer_connect_ip() == "10.1.2.3"
    monkeypatch.delenv(CONNECT_IP_ENV)
    monkeypatch.delenv("VLLM_HOST_IP", raising=False)
    assert writer_connect_ip().count(".") == 3


def meta(n: int, dtype: Any = torch.float32, device: str = "cpu") -> TensorMeta:
    return TensorMeta(dtype, (n,), device)


def test_buckets_one_per_device_type_aligned_large_alone_empty_skipped() -> None:
    metas = [meta(3), meta(5, torch.bfloat16), meta(0), meta(10_000), meta(2, device="cuda"),
             meta(1, torch.bool)]
    buckets, singles = plan_buckets(metas, TransferOptions(large_bytes=4096))
    assert singles == [3]
    assert [b.device for b in buckets] == ["cpu", "cuda"]
    cpu = buckets[0]
    assert [s[0] for s in cpu.slots] == [0, 1, 5]
    assert all(off % 16 == 0 for _, off, _ in cpu.slots)
    assert [n for _, _, n in cpu.slots] == [12, 10, 1]
    assert plan_buckets(metas, TransferOptions(coalesce=False)) == ([], [0, 1, 3, 4, 5])


def test_tensor_meta_matches_and_allocates() -> None:
    t = torch.zeros(2, 3, dtype=torch.bfloat16)
    m = TensorMeta.of(t)
    assert m.matches(t) and not m.matches(t.float()) and m.nbytes == 12
    assert m.empty().shape == (2, 3) and TensorMeta.of(torch.tensor(1.0)).numel == 1


def test_the_process_group_constructors_hand_every_argument_to_the_torch_layer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MessageQueue's two classmethods are vLLM's names for the torch layer's
    constructors: each argument reaches it as given, the defaults as vLLM's."""
    from verifiedring import MessageQueue
    from verifiedring.distributed import group

    calls: list[tuple[str, tuple[object, ...]]] = []

    def record(name: str, result: object) -> object:
        def made(*args: object) -> object:
            calls.append((name, args))
            return result
        return made

    made: Any = object()  # what the torch layer returned
    handles: Any = [object()]
    pg, handle = object(), cast(Any, object())
    monkeypatch.setattr(group, "create_from_process_group", record("many", made))
    monkeypatch.setattr(group, "create_from_process_group_single_reader",
                        record("single", (made, handles)))
    assert MessageQueue.create_from_process_group(pg, 1024, 4) is made
    assert MessageQueue.create_from_process_group(pg, 2048, 8, 3, handle, False) is made
    assert MessageQueue.create_from_process_group_single_reader(pg, 1024, 4) == (made, handles)
    assert MessageQueue.create_from_process_group_single_reader(
        pg, 2048, 8, reader_rank=2, blocking=True
    ) == (made, handles)
    assert calls == [
        ("many", (MessageQueue, pg, 1024, 4, 0, None, True)),
        ("many", (MessageQueue, pg, 2048, 8, 3, handle, False)),
        ("single", (MessageQueue, pg, 1024, 4, 0, False)),
        ("single", (MessageQueue, pg, 2048, 8, 2, True)),
    ]
