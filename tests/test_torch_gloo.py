"""Issue 14: the engine-driven torch.distributed path, on Gloo with CPU tensors, under real
mpirun at 1, 2 and 3 ranks (``HVDCORE_CPU_OPERATIONS=gloo``).

CI has no GPU, so this is where the code the NCCL plane shares with Gloo runs: the TorchBackend
(fusion buffers, scaling, uneven allgather/reducescatter, alltoallv, process-set groups), the
binding's routing and delivery, negotiation and errors. The torch programs the MPI path is
tested with run again here, on Gloo, against the same in-process references.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from conftest import ok_lines, program, run_mpi
from torch_semantics_runs import SECTIONS, check_section

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]

GLOO = {"HVDCORE_CPU_OPERATIONS": "gloo"}


def _ok_lines(np: int, args: list[str], marker: str, timeout: float,
              env: dict[str, str] | None = None) -> list[str]:
    return ok_lines(run_mpi(np, args, env={**GLOO, **(env or {})}, timeout=timeout), np, marker)


_ENGINE_LAUNCHES: dict[int, subprocess.CompletedProcess[str]] = {}


def _engine_launch(np: int) -> subprocess.CompletedProcess[str]:
    """``torch_gloo.py engine`` at ``np`` ranks, launched once per world size (its ``engine``
    and ``steady`` sections share the launch: torch's import costs more than their checks)."""
    if np not in _ENGINE_LAUNCHES:
        _ENGINE_LAUNCHES[np] = run_mpi(np, [program("torch_gloo.py"), "engine"], env=GLOO,
                                       timeout=240)
    return _ENGINE_LAUNCHES[np]


def test_gloo_plane_fuses_negotiates_and_traces(world_size: int) -> None:
    """Fusion (10 grouped tensors = 1 Gloo call), a data-plane mismatch raised on every rank,
    process-set groups, GLOO_* timeline spans."""
    ok_lines(_engine_launch(world_size), world_size, "torch-gloo engine")


def test_repeated_gloo_allreduces_match_the_reference_step_after_step(world_size: int) -> None:
    """Issue 51: a cached plane tensor takes the host tensor's steady route (the round alone,
    then the plane's bound call); every result, new or in place, is the in-process reference
    of that step, and mistakes still fail on every rank."""
    ok_lines(_engine_launch(world_size), world_size, "torch-gloo steady")


def test_shutdown_then_init_starts_the_planes_clean(world_size: int) -> None:
    """Issue 62: ``shutdown()`` + ``init()`` in process (an elastic reset's) registers a new
    Gloo plane, forgets the in-place buffers of the old one, and the old steady names, fusion
    and process sets work on the new one."""
    ok_lines(_engine_launch(world_size), world_size, "torch-gloo reinit")


def test_collectives_on_gloo_match_torch_reference(world_size: int, shared_launch) -> None:
    # one launch with the optimizer and errors programs (SHARED_LAUNCHES in conftest.py)
    lines = ok_lines(shared_launch("torch_gloo", world_size, GLOO), world_size, "torch-collectives")
    assert all(int(re.search(r"checks=(\d+)", ln).group(1)) > 120 for ln in lines)


def test_distributed_optimizer_on_gloo_matches_single_process(world_size: int,
                                                              shared_launch) -> None:
    ok_lines(shared_launch("torch_gloo", world_size, GLOO), world_size, "torch-optimizer")


def test_errors_on_gloo_are_clear_and_catchable(world_size: int, shared_launch) -> None:
    lines = ok_lines(shared_launch("torch_gloo", world_size, GLOO), world_size, "torch-errors")
    if world_size > 1:
        assert all("shape-mismatch,model-mismatch,zero-grad-in-flight" in ln for ln in lines), lines


def test_error_sequence_on_gloo(world_size: int) -> None:
    """Mismatches of name/shape/dtype/op and one-rank argument errors fail on every rank;
    the next collective works; shutdown returns."""
    env = {**GLOO, "HVDCORE_STALL_CHECK_TIME_SECONDS": "10",
           "HVDCORE_STALL_SHUTDOWN_TIME_SECONDS": "0", "ROUNDS": "2"}
    res = run_mpi(world_size, [program("torch_error_sequence.py")], env=env, timeout=180)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    done = [int(d) for d in re.findall(r"SEQUENCE OK (\d+)", res.stdout)]
    assert done == [2 * (8 if world_size == 1 else 12)] * world_size, out[-4000:]
    assert "stalled collectives" not in out


THREAD = {**GLOO, "HVDCORE_PROGRESS": "thread"}


def test_blocking_calls_on_gloo_with_thread_progress(world_size: int, shared_launch) -> None:
    """Thread progress (``auto``'s choice where each rank has 2+ CPUs: GPU nodes), where the
    binding's blocking calls on a torch.distributed plane hold the engine before they submit
    (``hvdcore.torch.handles.blocking``): the collectives, the optimizer and the errors
    programs give their in-process references and errors at every world size. Launched with
    ``hvdcorerun --gloo``: the whole job on the Gloo controller (issue 62), no MPI in it."""
    res = shared_launch("torch_gloo", world_size, THREAD, controller="gloo")
    for marker in ("torch-collectives", "torch-optimizer", "torch-errors"):
        ok_lines(res, world_size, marker)


def test_error_sequence_on_gloo_with_thread_progress() -> None:
    """One-rank argument errors and mismatches of blocking calls raised on every rank while
    the caller holds the engine; the next collective works; shutdown returns."""
    env = {**THREAD, "HVDCORE_STALL_CHECK_TIME_SECONDS": "10",
           "HVDCORE_STALL_SHUTDOWN_TIME_SECONDS": "0", "ROUNDS": "2"}
    res = run_mpi(3, [program("torch_error_sequence.py")], env=env, timeout=180)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert [int(d) for d in re.findall(r"SEQUENCE OK (\d+)", res.stdout)] == [24] * 3, out[-4000:]
    assert "stalled collectives" not in out


@pytest.fixture(scope="module")
def semantics_on_gloo() -> subprocess.CompletedProcess[str]:
    """Every section of tests/programs/torch_semantics.py in one launch of 3 ranks on Gloo."""
    return run_mpi(3, [program("torch_semantics.py"), *SECTIONS], env=GLOO, timeout=400)


@pytest.mark.parametrize("section", SECTIONS)
def test_horovod_semantics_on_gloo(section: str,
                                   semantics_on_gloo: subprocess.CompletedProcess[str]) -> None:
    check_section(semantics_on_gloo, 3, section)


def test_stall_on_gloo_warns_then_ends_job() -> None:
    # Rank 1 sleeps 60 s: only the stall shutdown (at 4 s) can end the job before the 60 s
    # hang guard; how long it took is not asserted.
    res = run_mpi(3, [program("torch_gloo.py"), "stall", "60"],
                  env={**GLOO, "HVDCORE_STALL_CHECK_TIME_SECONDS": "1",
                       "HVDCORE_STALL_SHUTDOWN_TIME_SECONDS": "4"}, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "WARNING stalled collectives" in out
    assert "allreduce 'skipped': submitted by ranks [0, 2]" in out and "missing on rank 1" in out
    assert "StallError" in out and "rank 1 woke up" not in out


def test_sigkilled_rank_on_gloo_ends_job_and_is_named() -> None:
    # peers sit in Gloo allreduces when rank 1 dies: the 30 s timeout is the hang guard
    res = run_mpi(3, [program("torch_gloo.py"), "kill"], env=GLOO, timeout=30)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "rank 1" in out and ("signal 9" in out or "is gone" in out), out[-4000:]
