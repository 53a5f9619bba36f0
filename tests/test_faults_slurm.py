"""Scenario 8 on a real 2-node localhost Slurm cluster (srun): a node's ranks SIGKILLed, and
``scancel`` of a running job, end the job (non-zero, out of the queue, nothing left running).
The ``-watchdog`` variants run srun without ``--kill-on-bad-exit`` (Slurm's default), so only
hvdcore's liveness watchdog can end the surviving ranks."""

from __future__ import annotations

import os

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
