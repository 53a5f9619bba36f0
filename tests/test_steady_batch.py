"""The steady path of a batch: a step's gradients reduced in place as one fused allreduce,
round and data as one call (compiled, hvdcore/engine/_hotpath.c, or through mpi4py), on
real ranks. Results are compared bit for bit with a reference; which path a step took
depends on scheduling, so no test counts it."""

from __future__ import annotations

import subprocess

import pytest
from conftest import program, run_mpi

pytestmark = pytest.mark.mpi


def _ok(res: subprocess.CompletedProcess[str], np_: int, what: str) -> list[str]:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln for ln in res.stdout.splitlines() if f" {what} ok" in ln]
    assert sorted(int(ln.split()[1]) for ln in lines) == list(range(np_)), res.stdout
    return lines


@pytest.mark.parametrize("hotpath", ["1", "0"], ids=["compiled", "mpi4py"])
def test_recurring_batches_are_exact(world_size: int, hotpath: str) -> None:
    res = run_mpi(world_size, [program("steady_batch.py"), "engine"],
                  env={"HVDCORE_HOTPATH": hotpath}, timeout=240)
    lines = _ok(res, world_size, "engine")
    # (1 rank has the response cache too: its round completes at once)
    want = "CompiledSteady" if hotpath == "1" else "PythonSteady"
    assert all(ln.endswith(f"steady={want}") for ln in lines), lines


@pytest.mark.parametrize("hotpath", ["1", "0"], ids=["compiled", "mpi4py"])
def test_a_late_rank_leaves_batches_exact(hotpath: str) -> None:
    res = run_mpi(3, [program("steady_batch.py"), "engine", "late"],
                  env={"HVDCORE_HOTPATH": hotpath}, timeout=240)
    _ok(res, 3, "engine")


def test_batches_on_the_hierarchical_plane_are_exact() -> None:
    res = run_mpi(3, [program("steady_batch.py"), "engine"],
                  env={"HVDCORE_HIERARCHICAL_ALLREDUCE": "1"}, timeout=240)
    _ok(res, 3, "engine")


def test_both_batch_implementations_agree_when_called_directly(world_size: int) -> None:
    res = run_mpi(world_size, [program("steady_batch.py"), "direct"], timeout=120)
    lines = _ok(res, world_size, "direct")
    assert all(ln.endswith("direct ok: PythonSteady CompiledSteady") for ln in lines), lines


def test_the_degraded_data_path_is_never_bypassed_by_batches() -> None:
    """FAULTS_DATA_PATH wraps the host backend to make it slower (the ReFrame checks must then
    FAIL): the batch path must not make the wrapped backend's MPI call itself."""
    code = ("import numpy as np\nimport hvdcore as hvd\nfrom hvdcore import basics, ops\n"
            "hvd.init()\nxs = [np.ones(4, np.float32), np.ones(3, np.float32)]\n"
            "names = ('w', 'b')\n"
            "for _ in range(50): hvd.synchronize(ops.allreduce_batch_async(xs, names))\n"
            "print('batches kept', len(basics.state().engine.batches._batches), xs[0][0])\n"
            "hvd.shutdown()\n")
    res = run_mpi(2, ["-c", code], env={"FAULTS_DATA_PATH": "repeat=2"}, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("batches kept 0 1.0") == 2, res.stdout
