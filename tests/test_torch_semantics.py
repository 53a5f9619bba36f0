"""Horovod 0.28.1 semantics of hvdcore.torch (issue 18, items 3, 5, 6, 7, 9) under real mpirun at
1, 2 and 3 ranks; program: tests/programs/torch_semantics.py, one section per test."""

from __future__ import annotations

import re

import pytest
from conftest import program, run_mpi

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]


def _run(np: int, section: str) -> None:
    proc = run_mpi(np, [program("torch_semantics.py"), section], timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, (f"{section} at np={np} failed (rc {proc.returncode}):\n"
                                  f"{out[-6000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"torch-semantics {section} ")]
    ranks = sorted(int(re.search(r"rank=(\d+)", ln).group(1)) for ln in lines)
    assert ranks == list(range(np)), f"expected an OK line from every rank:\n{out[-4000:]}"
    checks = {int(re.search(r"checks=(\d+)", ln).group(1)) for ln in lines}
    assert len(checks) == 1 and checks.pop() > 5, lines


def test_gradients_are_horovods(world_size: int) -> None:
    """allgather/broadcast average, reducescatter (size for Sum, scales), allreduce with its op,
    alltoall sent back; gradient="exact" keeps the summed-loss derivatives (item 3)."""
    _run(world_size, "grad")


def test_alltoall_returns_and_errors(world_size: int) -> None:
    """alltoall(t) -> tensor, with splits -> (output, received_splits), async -> pair; bad
    splits / indivisible dim 0 are ValueError on every rank and the next collective works."""
    _run(world_size, "alltoall")


def test_sparse_allreduce_async_handle_is_callable(world_size: int) -> None:
    _run(world_size, "sparse")


def test_broadcast_optimizer_state_options_and_no_grad(world_size: int) -> None:
    """Tensor/int/bool/tuple options keep type and root's value through a DistributedOptimizer,
    no_grad models, fresh state, forced allreduce of an unused parameter (item 7)."""
    _run(world_size, "bcast_state")


def test_optimizer_names_warning_and_sparse(world_size: int) -> None:
    """allreduce.noname.{i}.{j} names, the step-after-synchronize warning, SparseAdam with
    sparse_as_dense False and True (item 9)."""
    _run(world_size, "optimizer")
