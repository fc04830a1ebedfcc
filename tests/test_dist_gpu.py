"""verifiedring.distributed with CUDA tensors: NCCL with >= 2 GPUs, gloo-carried CUDA with 1.

Skips cleanly (with the reason) where CUDA is absent. `make gpu-check` runs these.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from support import dist_worlds  # noqa: E402

from verifiedring.testing.launcher import run_group  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(240)]

N_GPU = torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(N_GPU < 1, reason="needs CUDA (no GPU here)")
def test_cuda_tensors_over_gloo_on_one_gpu() -> None:
    out = run_group(dist_worlds.world_device, 2, args=(False,), timeout=200)
    assert out[0] == out[1] > 20


@pytest.mark.skipif(
    N_GPU < 2, reason=f"NCCL needs one GPU per rank: >= 2 GPUs, found {N_GPU}"
)
def test_cuda_tensors_over_nccl() -> None:
    if not torch.distributed.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    out = run_group(dist_worlds.world_device, 2, args=(True,), backend="nccl", timeout=200)
    assert out[0] == out[1] > 20
