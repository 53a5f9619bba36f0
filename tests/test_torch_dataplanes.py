"""Issue 14: choosing the data plane of device tensors, and the CUDA-aware MPI plane's code.

The choice needs GPUs to be made for real; here its decision function is checked on every
combination of rank votes, and the CUDA-aware MPI backend runs under real mpirun on CPU
tensors (mpi4py takes their NumPy views where it would take CUDA tensors' device pointers).
"""

from __future__ import annotations

import pytest
from conftest import run_mpi

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch]

OK = (True, "ok", False)
NO_GPU = (False, "no CUDA/ROCm device visible to torch", False)
NO_NCCL_AWARE = (False, "this torch build has no NCCL/RCCL backend", True)
MPI_AWARE = (False, "HVDCORE_GPU_OPERATIONS=mpi", True)
MPI_PLAIN = (False, "HVDCORE_GPU_OPERATIONS=mpi", False)


@pytest.mark.parametrize("setting, votes, path", [
    ("auto", [OK, OK, OK], "nccl"),
    ("nccl", [OK, OK], "nccl"),
    ("auto", [OK, NO_GPU], "mpi-host-staging"),
    ("auto", [NO_NCCL_AWARE, NO_NCCL_AWARE], "mpi-cuda-aware"),
    ("auto", [NO_NCCL_AWARE, NO_GPU], "mpi-host-staging"),
    ("mpi", [MPI_AWARE, MPI_AWARE], "mpi-cuda-aware"),
    ("mpi", [MPI_AWARE, MPI_PLAIN], "mpi-host-staging"),
    ("nccl", [OK, NO_GPU], "error"),
    ("nccl", [NO_NCCL_AWARE, NO_NCCL_AWARE], "error"),
])
def test_gpu_path_choice(setting: str, votes: list, path: str) -> None:
    from hvdcore.torch.dataplanes import choose_gpu_path

    got, why = choose_gpu_path(setting, votes)
    assert got == path
    for rank, (ok, reason, _) in enumerate(votes):  # every refusing rank's reason is named
        if not ok:
            assert reason in why, why
            assert "all ranks" in why or f"ranks [{rank}" in why or f", {rank}" in why, why


@pytest.mark.mpi
def test_cuda_aware_mpi_plane_code_on_cpu_tensors(world_size: int, shared_launch) -> None:
    # one launch with test_torch_binding.py's programs (SHARED_LAUNCHES["torch"] in conftest.py)
    res = shared_launch("torch", world_size)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    assert out.count("torch-mpi-plane") == world_size and "checks=13 OK" in out, out[-3000:]


@pytest.mark.mpi
def test_default_planes_are_reported() -> None:
    code = ("import hvdcore.torch as hvd; hvd.init(); "
            "print('CPU', hvd.cpu_operations()); print('GPU', hvd.gpu_operations()); "
            "hvd.shutdown()")
    res = run_mpi(2, ["-c", code], timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("CPU mpi (default (MPI))") == 2, res.stdout
    assert res.stdout.count("GPU mpi-host-staging (all ranks: no CUDA/ROCm device") == 2


@pytest.mark.mpi
def test_unknown_cpu_operations_value_is_a_config_error() -> None:
    res = run_mpi(2, ["-c", "import hvdcore.torch as hvd; hvd.init()"],
                  env={"HVDCORE_CPU_OPERATIONS": "ccl"}, timeout=60)
    assert res.returncode != 0
    assert "HVDCORE_CPU_OPERATIONS" in res.stderr and "gloo" in res.stderr, res.stderr[-2000:]
