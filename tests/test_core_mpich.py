"""hvdcore on a second MPI: MPICH 5.0.2 (the ``mpich`` wheel from PyPI, :mod:`harness.mpich_wheel`),
launched by its Hydra ``mpirun`` through ``hvdcorerun``, mpi4py on MPICH's library.

- Every core collective against its NumPy reference (tests/programs/core_collectives.py) at 2
  and 3 ranks; at 2 ranks ``a + b == b + a`` exactly, so the results' digests must be the same
  bits as under Open MPI (this suite's MPI). The torch binding's collectives (2 and 3 ranks) and
  DistributedOptimizer (2 ranks) against their single-process references.
- The launcher and the library mismatched (Hydra starts the ranks, mpi4py loads Open MPI, so
  each process is a world of one): a clear error on every rank, never N copies of rank 0.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import program, run_mpi

from harness import mpich_wheel

pytestmark = pytest.mark.mpi

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mpich() -> Path:
    return mpich_wheel.install()


def _on_mpich(np_: int, args: list[str], use_library: bool = True
              ) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    return subprocess.run(
        [sys.executable, "-m", "hvdcore.runner", "-np", str(np_), sys.executable, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**mpich_wheel.environ(base, use_library), "PYTHONPATH": str(ROOT)})


def _digests(out: str) -> dict[str, str]:
    return dict(re.findall(r"rank (\d+): CHECKS \d+ DIGEST (\w+)", out))


@pytest.mark.parametrize("np_", [2, 3])
def test_core_collectives_on_mpich(mpich: Path, np_: int) -> None:
    res = _on_mpich(np_, [program("core_collectives.py")])
    assert res.returncode == 0, res.stdout + res.stderr
    counts = [int(c) for c in re.findall(r"CHECKS (\d+)", res.stdout)]
    assert len(counts) == np_ and min(counts) > 250, res.stdout
    assert res.stdout.count("CONTROLLER mpi") == np_, res.stdout
    if np_ == 2:
        ours = run_mpi(2, [program("core_collectives.py")], timeout=180)
        assert ours.returncode == 0, ours.stdout + ours.stderr
        assert _digests(res.stdout) == _digests(ours.stdout) and len(_digests(ours.stdout)) == 2


@pytest.mark.torch
@pytest.mark.parametrize(("name", "np_", "said"), [
    ("torch_collectives.py", 2, "torch-collectives"), ("torch_collectives.py", 3,
                                                       "torch-collectives"),
    ("torch_optimizer.py", 2, "torch-optimizer")])
def test_torch_binding_on_mpich(mpich: Path, name: str, np_: int, said: str) -> None:
    """The torch binding's collectives (against torch references computed in one process) and
    DistributedOptimizer (against single-process training) on MPICH's host plane."""
    pytest.importorskip("torch")
    res = _on_mpich(np_, [program(name)])
    assert res.returncode == 0, res.stdout + res.stderr
    lines = re.findall(rf"^\[\d+\] {said} rank=(\d+) size=(\d+) checks=(\d+) OK$", res.stdout,
                       re.M)
    assert sorted(int(r) for r, _, _ in lines) == list(range(np_)), res.stdout
    assert all(int(n) == np_ and int(c) > 100 for _, n, c in lines), res.stdout


def test_mpi_library_of_another_launcher_is_a_clear_error(mpich: Path, tmp_path: Path) -> None:
    script = tmp_path / "init.py"
    script.write_text("import hvdcore\nhvdcore.init()\nprint('rank', hvdcore.rank(), "
                      "'of', hvdcore.size(), flush=True)\n")
    res = _on_mpich(2, [str(script)], use_library=False)
    assert res.returncode != 0, res.stdout + res.stderr
    assert "rank 0 of 1" not in res.stdout, res.stdout
    for rank in (0, 1):
        said = [ln for ln in res.stderr.splitlines()
                if ln.startswith(f"[{rank}] ") and "CapabilityError" in ln]
        assert said, res.stderr
        assert "started 2 ranks (PMI_SIZE=2), but MPI_COMM_WORLD holds this process alone" \
            in said[-1] and "MPI4PY_LIBMPI" in said[-1], said


def test_the_mismatch_rule() -> None:
    """The launcher's size against the world's: only a world of one under a launch of more."""
    from hvdcore.controllers.mpi_mismatch import launcher_size_mismatch

    lib = "MPICH Version:      5.0.2\nMPICH Release date: ..."
    said = launcher_size_mismatch({"OMPI_COMM_WORLD_SIZE": "4"}, 1, lib)
    assert said and said.startswith("Open MPI's mpirun started 4 ranks") and "(MPICH Version:" \
        in said
    assert launcher_size_mismatch({"OMPI_COMM_WORLD_SIZE": "4"}, 4, lib) is None
    assert launcher_size_mismatch({"PMI_SIZE": "1"}, 1, lib) is None  # mpirun -np 1
    assert launcher_size_mismatch({}, 1, lib) is None  # a lone process
    assert launcher_size_mismatch({"PMI_SIZE": "x"}, 1, lib) is None
    # srun's step size counts where no MPI launcher's variable is set (srun --mpi=none, or a
    # --mpi plugin the library does not speak): as Slurm 22.05 sets them for a task of srun -n2
    task = {"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_NTASKS": "2"}
    said = launcher_size_mismatch(task, 1, lib)
    assert said and said.startswith("srun started 2 tasks (SLURM_STEP_NUM_TASKS=2)") \
        and "comm=MPI.COMM_SELF" in said
    assert launcher_size_mismatch(task, 2, lib) is None
    assert "SLURM_MPI_TYPE=pmix" in (launcher_size_mismatch(
        {**task, "SLURM_MPI_TYPE": "pmix"}, 1, lib) or "")
    # mpirun inside an allocation: its ranks inherit the daemons' srun step (one task per
    # node); the launcher's own size decides (mpirun -np 1 on two nodes is a world of one)
    assert launcher_size_mismatch({**task, "OMPI_COMM_WORLD_SIZE": "1"}, 1, lib) is None
    assert launcher_size_mismatch({**task, "PMI_SIZE": "1"}, 1, lib) is None
    # the batch script itself: no step variables (SLURM_NTASKS is the allocation's)
    assert launcher_size_mismatch({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, 1, lib) is None
