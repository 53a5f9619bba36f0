"""The steady path: a repeated blocking allreduce of a cached host tensor, round and data as
one call (compiled, hvdcore/engine/_hotpath.c, or through mpi4py), on real ranks."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, program, run_mpi

pytestmark = pytest.mark.mpi


def _ok(res: subprocess.CompletedProcess[str], np_: int, what: str) -> list[str]:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln for ln in res.stdout.splitlines() if f" {what} ok" in ln]
    assert sorted(int(ln.split()[1]) for ln in lines) == list(range(np_)), res.stdout
    return lines


def test_the_compiled_hot_path_is_built_and_usable() -> None:
    """scripts/setup.sh builds it (libopenmpi-dev gives mpicc); the install must not lose it
    silently, or every figure of benchmarks/allreduce.py would be the slower path's."""
    code = ("from mpi4py import MPI\nfrom hvdcore.backends import mpi_steady\n"
            "m, why = mpi_steady.compiled_module()\nprint(m is not None, why)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[0] == "True", res.stdout


@pytest.mark.parametrize("hotpath", ["1", "0"], ids=["compiled", "mpi4py"])
def test_repeated_allreduces_are_exact_on_every_dtype_op_and_output(
        world_size: int, hotpath: str) -> None:
    res = run_mpi(world_size, [program("steady_path.py"), "exact"],
                  env={"HVDCORE_HOTPATH": hotpath}, timeout=240)
    lines = _ok(res, world_size, "exact")
    # (1 rank has the response cache too: its round completes at once)
    want = "CompiledSteady" if hotpath == "1" else "PythonSteady"
    assert all(ln.endswith(f"steady={want}") for ln in lines), lines


@pytest.mark.parametrize("hotpath,progress", [("1", "auto"), ("0", "auto"), ("1", "thread")],
                         ids=["compiled", "mpi4py", "compiled-thread"])
def test_a_late_rank_leaves_the_results_exact(hotpath: str, progress: str) -> None:
    """(With thread progress a small async call that a peer has not offered yet is left
    pending by the caller for the engine thread: HVDCORE_ASYNC_INLINE_BYTES.)"""
    res = run_mpi(3, [program("steady_path.py"), "late"],
                  env={"HVDCORE_HOTPATH": hotpath, "HVDCORE_PROGRESS": progress}, timeout=240)
    _ok(res, 3, "late")


def test_on_the_hierarchical_plane_sizes_it_takes_over_skip_the_steady_call() -> None:
    res = run_mpi(3, [program("steady_path.py"), "exact"],
                  env={"HVDCORE_HIERARCHICAL_ALLREDUCE": "1"}, timeout=240)
    _ok(res, 3, "exact")


def test_both_implementations_agree_when_called_directly(world_size: int) -> None:
    res = run_mpi(world_size, [program("steady_path.py"), "direct"], timeout=120)
    lines = _ok(res, world_size, "direct")
    assert all(ln.endswith("direct ok: PythonSteady CompiledSteady") for ln in lines), lines


def test_the_degraded_data_path_is_never_bypassed() -> None:
    """FAULTS_DATA_PATH wraps the host backend to make it slower (the ReFrame checks must then
    FAIL): the steady path must not make the wrapped backend's MPI call itself."""
    code = ("import numpy as np\nimport hvdcore as hvd\nfrom hvdcore import basics\n"
            "hvd.init()\nx = np.ones(4, np.float32)\n"
            "for _ in range(50): hvd.allreduce(x, name='w')\n"
            "print('steady kept', len(basics.state().engine.steady._by_name))\nhvd.shutdown()\n")
    res = run_mpi(2, ["-c", code], env={"FAULTS_DATA_PATH": "repeat=2"}, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("steady kept 0") == 2, res.stdout
