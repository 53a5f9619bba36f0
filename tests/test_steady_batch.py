"""The steady path of a batch: a step's gradients reduced in place as one fused allreduce,
round and data as one call, on real ranks, with both implementations: compiled
(hvdcore/backends/_hotpath.c, ``HVDCORE_HOTPATH=1``; skipped with the runtime's reason where it
is not built, tests/hotpath_status.py) and mpi4py (``=0``). Results are compared bit for bit
with a reference; which path a step took depends on scheduling, so no test counts it. The
engine, late, hierarchical and direct checks share their launches with
tests/test_steady_path.py (tests/steady_runs.py: one mpirun per world size and hotpath runs
both programs)."""

from __future__ import annotations

import subprocess

import pytest
from conftest import run_mpi
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
    """The SteadyCalls class an engine makes for ``HVDCORE_HOTPATH=hotpath``."""
    if hotpath == "1":
        skip_unless_compiled()
        return "CompiledSteady"
    return "PythonSteady"


@HOTPATH
def test_recurring_batches_are_exact(world_size: int, hotpath: str) -> None:
    want = _steady(hotpath)
    lines = _ok(steady_launch(world_size, hotpath), world_size, "engine")
    # (1 rank has the response cache too: its round completes at once)
    assert all(ln.endswith(f"steady={want}") for ln in lines), lines


@HOTPATH
def test_a_late_rank_leaves_batches_exact(hotpath: str) -> None:
    _steady(hotpath)
    _ok(steady_launch(3, hotpath, "late"), 3, "engine")


@HOTPATH
def test_batches_on_the_hierarchical_plane_are_exact(hotpath: str) -> None:
    want = _steady(hotpath)
    lines = _ok(steady_launch(3, hotpath, "hierarchical"), 3, "engine")
    assert all(ln.endswith(f"steady={want}") for ln in lines), lines


def test_both_batch_implementations_agree_when_called_directly(world_size: int) -> None:
    """Where the compiled module does not run, the mpi4py one still makes every check."""
    usable, why = compiled_status()
    lines = _ok(steady_launch(world_size, "0"), world_size, "direct-batch")
    want = "direct-batch ok: PythonSteady" + (" CompiledSteady" if usable else " (compiled: ")
    assert all(want in ln for ln in lines), (lines, why)


@HOTPATH
def test_the_degraded_data_path_is_never_bypassed_by_batches(hotpath: str) -> None:
    """FAULTS_DATA_PATH wraps the host backend to make it slower (the ReFrame checks must then
    FAIL): the batch path must not make the wrapped backend's MPI call itself."""
    _steady(hotpath)
    code = ("import numpy as np\nimport hvdcore as hvd\nfrom hvdcore import basics, ops\n"
            "hvd.init()\nxs = [np.ones(4, np.float32), np.ones(3, np.float32)]\n"
            "names = ('w', 'b')\n"
            "for _ in range(50): hvd.synchronize(ops.allreduce_batch_async(xs, names))\n"
            "print('batches kept', len(basics.state().engine.batches._batches), xs[0][0])\n"
            "hvd.shutdown()\n")
    res = run_mpi(2, ["-c", code], env={"FAULTS_DATA_PATH": "repeat=2",
                                        "HVDCORE_HOTPATH": hotpath}, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("batches kept 0 1.0") == 2, res.stdout
