"""``srun`` started the tasks, but the MPI library mpi4py loads cannot join srun's job: on the
2-node localhost Slurm, ``srun -n2 --mpi=none`` with mpi4py on MPICH (no PMI offered, so MPICH
makes each task a world of one) and the MPI controller asked for. Every task must refuse with
the step's size in the message, never train as rank 0 of 1."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from harness import mpich_wheel
from harness.slurm_fixtures import slurm_marks, two_node_cluster  # noqa: F401
from harness.slurm_localhost import SlurmCluster

pytestmark = slurm_marks()

ROOT = Path(__file__).resolve().parents[1]


def test_srun_tasks_that_mpi_makes_worlds_of_one_are_refused(cluster: SlurmCluster,
                                                             tmp_path: Path) -> None:
    mpich_wheel.install()
    script = tmp_path / "init.py"
    script.write_text("import hvdcore\nhvdcore.init()\nprint('rank', hvdcore.rank(), 'of', "
                      "hvdcore.size(), flush=True)\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    env = {**mpich_wheel.environ(base), "PYTHONPATH": str(ROOT), "HVDCORE_CONTROLLER": "mpi"}
    res = subprocess.run(["srun", "-N1", "-n2", "--mpi=none", "--label", sys.executable,
                          str(script)], env=cluster.env(env), cwd=tmp_path,
                         capture_output=True, text=True, timeout=180)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert not re.search(r"^\d+: rank \d+ of", out, re.M), out  # nobody trained alone
    for task in (0, 1):
        said = [ln for ln in out.splitlines()
                if ln.startswith(f"{task}: ") and "CapabilityError" in ln]
        assert said, out
        assert ("srun started 2 tasks (SLURM_STEP_NUM_TASKS=2), but MPI_COMM_WORLD holds this "
                "process alone: the MPI library mpi4py loaded (MPICH Version:") in said[-1], said
