"""Horovod 0.28.1 semantics of hvdcore.torch (issue 18, items 3, 5, 6, 7, 9) under real mpirun at
1, 2 and 3 ranks; program: tests/programs/torch_semantics.py, one section per test. The five
sections share one launch per world size with test_torch_binding.py's programs and
test_torch_dataplanes.py's (SHARED_LAUNCHES["torch"] in conftest.py); each test judges its own
section's lines."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
from conftest import ok_lines
from torch_semantics_runs import check_section

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]

@pytest.fixture
def semantics_run(shared_launch) -> Callable[[int], subprocess.CompletedProcess[str]]:
    """``np -> the launch of every section at np ranks``: SHARED_LAUNCHES["torch"] (with
    test_torch_binding.py's programs; one launch per world size and pytest worker)."""
    return lambda np: shared_launch("torch", np)


def _run(np: int, section: str, semantics_run: Callable) -> None:
    check_section(semantics_run(np), np, section)


def test_gradients_are_horovods(world_size: int, semantics_run: Callable) -> None:
    """allgather/broadcast average, reducescatter (size for Sum, scales), allreduce with its op,
    alltoall sent back; gradient="exact" keeps the summed-loss derivatives (item 3)."""
    _run(world_size, "grad", semantics_run)


def test_alltoall_returns_and_errors(world_size: int, semantics_run: Callable) -> None:
    """alltoall(t) -> tensor, with splits -> (output, received_splits), async -> pair; bad
    splits / indivisible dim 0 are ValueError on every rank and the next collective works."""
    _run(world_size, "alltoall", semantics_run)


def test_sparse_allreduce_async_handle_is_callable(world_size: int, semantics_run: Callable) -> None:
    _run(world_size, "sparse", semantics_run)


def test_broadcast_optimizer_state_options_and_no_grad(world_size: int, semantics_run: Callable) -> None:
    """Tensor/int/bool/tuple options keep type and root's value through a DistributedOptimizer,
    no_grad models, fresh state, forced allreduce of an unused parameter (item 7)."""
    _run(world_size, "bcast_state", semantics_run)


def test_optimizer_names_warning_and_sparse(world_size: int, semantics_run: Callable) -> None:
    """allreduce.noname.{i}.{j} names, the step-after-synchronize warning, SparseAdam with
    sparse_as_dense False and True (item 9)."""
    _run(world_size, "optimizer", semantics_run)


def test_horovod_parity_init_scaling_warning(world_size: int, semantics_run: Callable) -> None:
    """Issue 52, items 1, 2 and 8 (section ``parity``; on Gloo in test_torch_gloo.py):

    - a stray second ``init()`` on one rank is local (Horovod: ``HorovodBasics.init`` in
      horovod/common/basics.py returns when initialised) and the next collectives work;
    - allreduce, grouped allreduce, reducescatter and grouped reducescatter equal Horovod's
      CPU arithmetic bit for bit (``AllreduceOp::ScaleBuffer`` / ``ScaleBufferImpl``,
      horovod/common/ops/collective_operations.{h,cc}: integers in float64, float16 in
      float32 rounded once; test_torch.py ``test_horovod_allreduce_prescale``, threshold 0,
      factor 0.1915194503788923), Sum and Average, prescale and postscale;
    - ``step()`` after ``synchronize()`` warns on every such step with Horovod's message
      (horovod/torch/optimizer.py ``_DistributedOptimizer.step``), so a Horovod script's
      ``filterwarnings`` matches it.
    """
    _run(world_size, "parity", semantics_run)


def test_optimizer_and_process_set_rules_are_horovods(world_size: int, shared_launch) -> None:
    """Horovod's rules where they decide (tests/programs/torch_horovod_rules.py): at one rank
    DistributedOptimizer is the wrapped optimizer (bit for bit, LBFGS with its closure); a
    rank outside the optimizer's process set steps alone; a closure is evaluated once and a
    second evaluation at several ranks is an error; groups keep their trainable parameters;
    a duplicate process set is a ValueError; objects travel by cloudpickle where it is
    installed, else a lambda is a clear error on every rank; is_homogeneous() is True on
    one host."""
    ok_lines(shared_launch("torch", world_size), world_size, "torch-horovod-rules")
