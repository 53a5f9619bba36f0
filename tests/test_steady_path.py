"""The steady path: a repeated blocking allreduce of a cached host tensor, round and data as
one call, on real ranks. Every check runs on both implementations, the compiled one
(hvdcore/backends/_hotpath.c, ``HVDCORE_HOTPATH=1``) and the mpi4py one (``=0``, also what an
install without the compiled module runs); the compiled variants skip, with the runtime's
reason, where it is not built (tests/hotpath_status.py). The exact, late, hierarchical and
direct checks share their launches with tests/test_steady_batch.py (tests/steady_runs.py:
one mpirun per world size and hotpath runs both programs)."""

from __future__ import annotations

import subprocess

import pytest
from conftest import program, run_mpi
from hotpath_status import compiled_status, skip_unless_compiled
from steady_runs import steady_launch

pytestmark = pytest.mark.mpi

HOTPATH = pytest.mark.parametrize("hotpath", ["1", "0"], ids=["compiled", "mpi4py"])


def _ok(res: subprocess.CompletedProcess[str], np_: int, what: str) -> list[str]:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln for ln in res.stdout.splitlines() if f" {what} ok" in ln]
    assert sorted(int(ln.split()[1]) for ln in lines) == list(range(np_)), res.stdout
    return lines


def _steady(hotpath: str) -> str:
    """The SteadyCalls class an engine makes for ``HVDCORE_HOTPATH=hotpath`` (the compiled
    variant skips where the compiled module does not run)."""
    if hotpath == "1":
        skip_unless_compiled()
        return "CompiledSteady"
    return "PythonSteady"


@HOTPATH
def test_repeated_allreduces_are_exact_on_every_dtype_op_and_output(
        world_size: int, hotpath: str) -> None:
    want = _steady(hotpath)
    lines = _ok(steady_launch(world_size, hotpath), world_size, "exact")
    # (1 rank has the response cache too: its round completes at once)
    assert all(ln.endswith(f"steady={want}") for ln in lines), lines


@pytest.mark.parametrize("hotpath,progress", [("1", "auto"), ("0", "auto"), ("1", "thread"),
                                              ("0", "thread")],
                         ids=["compiled", "mpi4py", "compiled-thread", "mpi4py-thread"])
def test_a_late_rank_leaves_the_results_exact(hotpath: str, progress: str) -> None:
    """(With thread progress a small async call that a peer has not offered yet is left
    pending by the caller for the engine thread: HVDCORE_ASYNC_INLINE_BYTES.)"""
    _steady(hotpath)
    if progress == "auto":  # (shared with test_steady_batch.py's late batches)
        res = steady_launch(3, hotpath, "late")
    else:
        res = run_mpi(3, [program("steady_path.py"), "late"],
                      env={"HVDCORE_HOTPATH": hotpath, "HVDCORE_PROGRESS": progress},
                      timeout=240)
    _ok(res, 3, "late")


@HOTPATH
def test_on_the_hierarchical_plane_sizes_it_takes_over_skip_the_steady_call(
        hotpath: str) -> None:
    want = _steady(hotpath)
    lines = _ok(steady_launch(3, hotpath, "hierarchical"), 3, "exact")
    assert all(ln.endswith(f"steady={want}") for ln in lines), lines


def test_both_implementations_agree_when_called_directly(world_size: int) -> None:
    """Where the compiled module does not run, the mpi4py one still makes every check."""
    usable, why = compiled_status()
    lines = _ok(steady_launch(world_size, "0"), world_size, "direct")
    want = "direct ok: PythonSteady" + (" CompiledSteady" if usable else " (compiled: ")
    assert all(want in ln for ln in lines), (lines, why)


@HOTPATH
def test_the_degraded_data_path_is_never_bypassed(hotpath: str) -> None:
    """FAULTS_DATA_PATH wraps the host backend to make it slower (the ReFrame checks must then
    FAIL): the steady path must not make the wrapped backend's MPI call itself."""
    _steady(hotpath)
    code = ("import numpy as np\nimport hvdcore as hvd\nfrom hvdcore import basics\n"
            "hvd.init()\nx = np.ones(4, np.float32)\n"
            "for _ in range(50): hvd.allreduce(x, name='w')\n"
            "print('steady kept', len(basics.state().engine.pipeline._by_name))\nhvd.shutdown()\n")
    res = run_mpi(2, ["-c", code], env={"FAULTS_DATA_PATH": "repeat=2",
                                        "HVDCORE_HOTPATH": hotpath}, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("steady kept 0") == 2, res.stdout
