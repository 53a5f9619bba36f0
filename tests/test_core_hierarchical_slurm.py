"""Hierarchical allreduce/allgather across the 2-node localhost Slurm (srun -N2 -n4 --mpi=pmix):
both fake nodes share one host, so only SLURM_NODEID separates them; the program must see two
nodes of two ranks, run the cross-node step, and match its references bit for bit."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import mpi_env, program
from test_core_hierarchical import KNOBS, reports

from harness.mpi_init_race import run_job
from harness.slurm_fixtures import FAKE_NODES_ENV, slurm_marks, two_node_cluster  # noqa: F401
from harness.slurm_localhost import SlurmCluster

pytestmark = slurm_marks()


def test_leader_path_across_two_slurm_nodes(cluster: SlurmCluster) -> None:
    cmd = ["srun", "-N2", "-n4", "--mpi=pmix", "--kill-on-bad-exit=1",
           sys.executable, program("core_hierarchical.py")]
    try:
        res = run_job(cmd, cluster.env(mpi_env({**FAKE_NODES_ENV, **KNOBS})), 400)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not finish in 400 s\n{exc.stdout!r}\n{exc.stderr!r}")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    got = reports(res.stdout)
    assert sorted(got) == [0, 1, 2, 3], out[-4000:]
    for rank, rep in got.items():
        assert rep["nodes"] == 2 and rep["local_size"] == 2, (rank, rep)
        assert rep["layout"] == "[[0, 1], [2, 3]]", (rank, rep)
        assert rep["shm"] > 100 and rep["leader"] > 0 and rep["checks"] > 500, (rank, rep)
    assert "4 ranks on 2 nodes" in res.stderr and "per-slice communicators" in res.stderr, \
        res.stderr[-4000:]
    print(next(ln for ln in res.stdout.splitlines() if "rank 0: HIER" in ln))
    print(next(ln for ln in res.stderr.splitlines() if "ranks on 2 nodes" in ln))
