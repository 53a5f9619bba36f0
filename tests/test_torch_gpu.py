"""Issue 14: device tensors through the engine-driven data planes, under real mpirun.

On one GPU: np 1 on NCCL/RCCL (every collective on CUDA tensors against a CPU reference,
fusion counted on the plane, a side-stream producer, NCCL_* timeline spans); np 2 on that one
GPU: the shared-GPU error on every rank (at the first device tensor; at init when NCCL is
forced) while CPU tensors still work, and host staging with
``HVDCORE_GPU_OPERATIONS=mpi``. With one GPU per rank on a bigger machine, every rank on NCCL.
These skip, naming what is missing, on machines without a GPU or NCCL; the program's
references still run everywhere through ``dryrun`` (the same checks on CPU tensors over Gloo).

The program follows hvdcore's README order (``hvd.init()``, then
``torch.cuda.set_device(hvd.local_rank())``), so ``test_nccl_on_every_gpu`` also tests that
this order gives each rank its own GPU.
"""

from __future__ import annotations

import pytest
from conftest import program, run_mpi

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]

PLANE = "rccl" if torch.version.hip else "nccl"


def need_gpu(gpus: int = 1, nccl: bool = True) -> None:
    """Skip, naming what is missing, unless ``gpus`` GPUs (and NCCL/RCCL) are usable."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm GPU visible to torch (torch.cuda.is_available() is False): "
                    "the device planes need a GPU machine")
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPUs, {torch.cuda.device_count()} visible")
    if nccl and not (torch.distributed.is_available() and torch.distributed.is_nccl_available()):
        pytest.skip(f"this torch build has no {PLANE.upper()} backend "
                    "(torch.distributed.is_nccl_available() is False)")


def ok_lines(proc, mode: str, np: int) -> list[str]:  # type: ignore[no-untyped-def]
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{mode} at np={np} failed (rc {proc.returncode}):\n{out[-6000:]}"
    assert "SKIP" not in proc.stdout, out[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"torch-gpu {mode} ")]
    assert len(lines) == np and all(ln.endswith("OK") for ln in lines), out[-4000:]
    return lines


def test_nccl_single_rank() -> None:
    """np 1 on NCCL: every collective, fusion, side stream, process set, NCCL_* spans."""
    need_gpu()
    proc = run_mpi(1, [program("torch_gpu.py"), PLANE], timeout=300)
    ok_lines(proc, PLANE, 1)


@pytest.mark.parametrize("knob", ["auto", "nccl"])
def test_shared_gpu_is_an_error_on_every_rank(knob: str) -> None:
    """np 2 on GPU 0. auto: init succeeds and CPU tensors work (as under Horovod), while an
    allreduce and a broadcast of a device tensor raise CapabilityError on both ranks, naming
    ranks [0, 1], the GPU and the host-staging knob (NCCL itself would refuse, naming neither),
    and a CPU allreduce works afterwards. HVDCORE_GPU_OPERATIONS=nccl: init raises it."""
    need_gpu()
    env = {"HVDCORE_GPU_OPERATIONS": "nccl"} if knob == "nccl" else None
    proc = run_mpi(2, [program("torch_gpu.py"), "duplicate"], env=env, timeout=180)
    ok_lines(proc, "duplicate", 2)
    errors = [ln for ln in proc.stdout.splitlines() if " error: " in ln]
    per_rank = 1 if knob == "nccl" else 2
    assert sorted(ln.split()[1] for ln in errors) == ["0"] * per_rank + ["1"] * per_rank, \
        proc.stdout


@pytest.mark.parametrize("np", [1, 2])
def test_host_staging(np: int) -> None:
    """HVDCORE_GPU_OPERATIONS=mpi: device tensors staged through host memory, or handed to
    MPI directly where it is CUDA-aware (np 2 shares one GPU, which only MPI allows); results
    on the device, MPI_* spans."""
    need_gpu(nccl=False)
    proc = run_mpi(np, [program("torch_gpu.py"), "staging"],
                   env={"HVDCORE_GPU_OPERATIONS": "mpi"}, timeout=300)
    ok_lines(proc, "staging", np)


def test_nccl_on_every_gpu() -> None:
    """One rank per GPU (2 or more GPUs): the uneven and process-set paths across ranks."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    need_gpu(gpus=max(2, n))
    proc = run_mpi(n, [program("torch_gpu.py"), PLANE], timeout=300)
    ok_lines(proc, PLANE, n)


@pytest.mark.parametrize("np", [1, 2])
def test_gpu_program_checks_on_gloo(np: int) -> None:
    """Runs without a GPU: the GPU program's checks on CPU tensors through the Gloo plane, so
    its references and the code the planes share stay right where CI can run them."""
    proc = run_mpi(np, [program("torch_gpu.py"), "dryrun"],
                   env={"HVDCORE_CPU_OPERATIONS": "gloo"}, timeout=180)
    ok_lines(proc, "dryrun", np)
