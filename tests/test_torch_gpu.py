"""Device tensors through hvdcore.torch: NCCL path and host staging (needs a GPU)."""

from __future__ import annotations

import pytest
from conftest import program, run_mpi

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch, pytest.mark.mpi,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="no CUDA/ROCm GPU visible to torch (torch.cuda.is_available() is "
                              "False): the device paths of hvdcore.torch.gpu need a GPU machine"),
]


def test_nccl_path_single_rank() -> None:
    if not torch.distributed.is_nccl_available():
        pytest.skip("this torch build has no NCCL/RCCL backend")
    proc = run_mpi(1, [program("torch_gpu.py"), "nccl" if not torch.version.hip else "rccl"],
                   timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "path=" in proc.stdout and "OK" in proc.stdout


@pytest.mark.parametrize("np", [1, 2])
def test_host_staging_path(np: int) -> None:
    proc = run_mpi(np, [program("torch_gpu.py"), "mpi-host-staging"],
                   env={"HVDCORE_GPU_OPERATIONS": "mpi"}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("OK") == np


def test_nccl_on_every_gpu() -> None:
    n = torch.cuda.device_count()
    if n < 2 or not torch.distributed.is_nccl_available():
        pytest.skip(f"NCCL between ranks needs one GPU per rank: {n} visible")
    proc = run_mpi(n, [program("torch_gpu.py"), "nccl" if not torch.version.hip else "rccl"],
                   timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("OK") == n
