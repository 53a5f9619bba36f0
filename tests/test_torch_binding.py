"""hvdcore.torch under real mpirun at 1, 2 and 3 ranks (programs in tests/programs/torch_*.py)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT, ok_lines, program, run_mpi

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]


def _run_ok(np: int, name: str, marker: str, timeout: float,
            env: dict[str, str] | None = None) -> list[str]:
    return ok_lines(run_mpi(np, [program(name)], env=env, timeout=timeout), np, marker)


def test_collectives_match_torch_reference(world_size: int, shared_launch) -> None:
    """Every collective, dtype handling, in-place/async variants, gradients, SyncBatchNorm.
    (The collectives, optimizer and errors programs share one launch per world size:
    ``SHARED_LAUNCHES`` in conftest.py.)"""
    lines = ok_lines(shared_launch("torch", world_size), world_size, "torch-collectives")
    checks = {int(re.search(r"checks=(\d+)", ln).group(1)) for ln in lines}
    assert len(checks) == 1 and checks.pop() > 120


def test_distributed_optimizer_matches_single_process(world_size: int, shared_launch) -> None:
    """K steps on N shards == one process on the concatenated batch; state equal everywhere."""
    lines = ok_lines(shared_launch("torch", world_size), world_size, "torch-optimizer")
    assert all("checks=" in ln for ln in lines)


@pytest.mark.parametrize("mode", ["thread", "caller"])
def test_distributed_optimizer_in_each_progress_mode(mode: str) -> None:
    """Gradients moved by the engine thread while backward runs (thread) and by the thread
    that calls step() (caller) both train exactly like one process on the whole batch."""
    lines = _run_ok(2, "torch_optimizer.py", "torch-optimizer", timeout=300,
                    env={"HVDCORE_PROGRESS": mode})
    assert all("checks=" in ln for ln in lines)


def test_errors_are_clear_and_catchable(world_size: int, shared_launch) -> None:
    lines = ok_lines(shared_launch("torch", world_size), world_size, "torch-errors")
    if world_size > 1:
        assert all("shape-mismatch,model-mismatch,zero-grad-in-flight" in ln for ln in lines), lines


def test_import_does_not_pull_tensorflow() -> None:
    code = ("import sys, hvdcore.torch as hvd; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'; "
            "assert set(hvd.__all__) <= set(dir(hvd)); print(len(hvd.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 60


def test_horovod_names_present() -> None:
    """Every horovod.torch name of the issue exists (drop-in import)."""
    import hvdcore.torch as hvd

    names = """init shutdown rank size local_rank local_size cross_rank cross_size is_initialized
    mpi_threads_supported mpi_built mpi_enabled gloo_built gloo_enabled nccl_built cuda_built
    rocm_built ddl_built ccl_built Average Sum Adasum Min Max Product allreduce allreduce_async
    allreduce_ allreduce_async_ grouped_allreduce grouped_allreduce_async grouped_allreduce_
    grouped_allreduce_async_ sparse_allreduce_async allgather allgather_async grouped_allgather
    grouped_allgather_async broadcast broadcast_ broadcast_async broadcast_async_ alltoall
    alltoall_async reducescatter reducescatter_async grouped_reducescatter
    grouped_reducescatter_async barrier join poll synchronize broadcast_object allgather_object
    ProcessSet add_process_set remove_process_set global_process_set start_timeline
    stop_timeline Compression DistributedOptimizer broadcast_parameters
    broadcast_optimizer_state SyncBatchNorm HorovodInternalError""".split()
    missing = [n for n in names if not hasattr(hvd, n)]
    assert not missing, missing
    from hvdcore.errors import HvdcoreError

    assert hvd.HorovodInternalError is HvdcoreError
    # Horovod 0.28.1's basics.nccl_built: NCCL_VERSION_CODE or 0, an int (not a bool)
    import torch.distributed as dist

    assert type(hvd.nccl_built()) is int and (hvd.nccl_built() > 0) == dist.is_nccl_available()
    assert hvd.Compression.fp16.compress.__doc__ and hvd.DistributedOptimizer.__doc__
