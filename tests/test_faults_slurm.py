"""Scenario 8 on a real 2-node localhost Slurm cluster (srun): a node's ranks SIGKILLed, and
``scancel`` of a running job, end the job (non-zero, out of the queue, nothing left running).
The ``-watchdog`` variants run srun without ``--kill-on-bad-exit`` (Slurm's default), so only
hvdcore's liveness watchdog can end the surviving ranks."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pytest

from faults.report import run_scenario

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]


@pytest.fixture(scope="module")
def slurm(monkeypatch_module: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from harness.slurm_localhost import SlurmCluster, missing_requirements

    missing = missing_requirements()
    if missing:
        pytest.skip("local Slurm cluster needs: " + ", ".join(missing))
    with SlurmCluster(nodes=2) as cluster:
        monkeypatch_module.setenv("SLURM_CONF", str(cluster.conf))
        yield cluster


@pytest.fixture(scope="module")
def monkeypatch_module():  # type: ignore[no-untyped-def]
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.mark.parametrize("key", ["slurm_node_loss_ends_job", "slurm_node_loss_ends_job_via_watchdog",
                                 "slurm_scancel_ends_job", "dead_rank_ends_job",
                                 "dead_rank_ends_job_via_watchdog"])
def test_slurm_fault(slurm, key: str) -> None:  # type: ignore[no-untyped-def]
    assert os.environ["SLURM_CONF"] == str(slurm.conf)
    row = run_scenario(key, "srun", 2, seed=1)
    assert row.clean == row.trials and not row.failures, "\n\n".join(row.failures)
    assert row.leftovers == 0


# Python's fault handler on a rank that died in MPI_Init under srun (s78, a core dump showed
# Open MPI's TCP BTL calling a NULL receive callback), paths and line put to this checkout's
_MPI_INIT_DUMP = """READY 2 1070
Fatal Python error: Segmentation fault

Current thread 0x00007f872ac2bb80 (most recent call first):
  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed
  File "<frozen importlib._bootstrap_external>", line 1241 in exec_module
  File "<frozen importlib._bootstrap>", line 1232 in _handle_fromlist
  File "{mpi_py}", line {line} in form
  File "{basics_py}", line 165 in init

Extension modules: numpy._core._multiarray_umath, mpi4py.MPI (total: 2)
srun: error: n1: task 0: Segmentation fault"""


def test_a_segfault_inside_mpi_init_is_told_from_any_other() -> None:
    """Only a crash at ``from mpi4py import MPI`` is the Open MPI startup race a Slurm job
    is run again for (again_on_crash, faults.report.run_scenario); any other crash stays a
    failure."""
    from harness.mpi_init_race import again_on_crash, mpi_init_crashed

    mpi_py = Path(__file__).resolve().parent.parent / "hvdcore" / "controllers" / "mpi.py"
    lines = mpi_py.read_text().splitlines()
    at = {key: next(i + 1 for i, ln in enumerate(lines) if key in ln)
          for key in ("from mpi4py import MPI", "world.Dup()")}
    dump = partial(_MPI_INIT_DUMP.format, mpi_py=mpi_py, basics_py=mpi_py.parent.parent / "b.py")
    assert mpi_init_crashed(dump(line=at["from mpi4py import MPI"]))
    assert not mpi_init_crashed(dump(line=at["world.Dup()"]))
    assert not mpi_init_crashed("srun: error: n1: task 0: Segmentation fault")
    assert not mpi_init_crashed(dump(line=at["from mpi4py import MPI"]).replace(
        "Segmentation fault\n\n", "Aborted\n\n"))
    assert mpi_init_crashed(dump(line=at["from mpi4py import MPI"]) * 2)  # two ranks, both
    assert not mpi_init_crashed(dump(line=at["from mpi4py import MPI"])
                                + dump(line=at["world.Dup()"]))
    runs: list[int] = []
    for line, want in ((at["from mpi4py import MPI"], 2), (at["world.Dup()"], 1)):
        runs.clear()
        again_on_crash(lambda: runs.append(1),  # noqa: B023
                       lambda _r: dump(line=line) if len(runs) == 1 else None, "a job")
        assert len(runs) == want, line
