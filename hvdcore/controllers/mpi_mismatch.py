"""A launcher and an MPI library that do not belong together: every rank alone.

When mpi4py loads another MPI library than the one whose launcher started the job (MPICH's
``mpiexec`` with mpi4py on Open MPI, or the reverse), or an MPI library that does not speak
the PMI that ``srun --mpi=...`` offers, ``MPI_Init`` does not find the job and each process
becomes a world of one: N copies of rank 0 of 1, each training alone, a silent wrong answer.
The launcher's own variables still say how many ranks it started, so
:func:`launcher_size_mismatch` compares them with ``MPI_COMM_WORLD``'s size and
:class:`~hvdcore.controllers.mpi.MPIController` refuses the job with its text, on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["launcher_size_mismatch"]

# (variable, who sets it): the size of the job an MPI launcher started
_SIZES = (("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
          ("PMI_SIZE", "a PMI launcher (MPICH/Intel MPI mpiexec, srun --mpi=pmi2)"))
# srun's size of the step, read only where no MPI launcher's variable is set: inside an
# allocation, mpirun's ranks inherit the SLURM_* of the srun step that started mpirun's
# daemons (one task per node), and the batch script itself is no step of several tasks
_SLURM_STEP = "SLURM_STEP_NUM_TASKS"


def _library(library: str) -> str:
    return library.strip().splitlines()[0].strip() if library.strip() else "unknown"


def _count(environ: Mapping[str, str], variable: str) -> int:
    value = environ.get(variable, "").strip()
    return int(value) if value.isdigit() else 0


def launcher_size_mismatch(environ: Mapping[str, str], world_size: int,
                           library: str) -> str | None:
    """Why this process cannot be one rank of its job, or None: the launcher started more
    than one rank (its variables) while ``MPI_COMM_WORLD`` (of the MPI library whose version
    string is ``library``) holds this process alone."""
    if world_size != 1:
        return None
    for variable, who in _SIZES:
        value = _count(environ, variable)
        if value > 1:
            return (f"{who} started {value} ranks ({variable}={value}), but MPI_COMM_WORLD "
                    "holds this process alone: mpi4py loaded another MPI library "
                    f"({_library(library)}) than the launcher's, and every rank would run as "
                    "rank 0 of 1. Launch with the mpirun of the library mpi4py uses, or point "
                    "mpi4py at the launcher's library (MPI4PY_LIBMPI=/path/to/libmpi.so.N, "
                    "mpi4py >= 4; or an mpi4py built against it)")
    if any(variable in environ for variable, _ in _SIZES):
        return None
    tasks = _count(environ, _SLURM_STEP)
    if tasks > 1 and "SLURM_PROCID" in environ:
        plugin = environ.get("SLURM_MPI_TYPE", "").strip()
        given = f", SLURM_MPI_TYPE={plugin}" if plugin else ""
        return (f"srun started {tasks} tasks ({_SLURM_STEP}={tasks}{given}), but "
                "MPI_COMM_WORLD holds this process alone: the MPI library mpi4py loaded "
                f"({_library(library)}) did not join srun's job, and every task would run as "
                "rank 0 of 1. Give srun a --mpi plugin this library supports (srun --mpi=list; "
                "Open MPI: pmix, MPICH/Intel MPI: pmi2), launch with the library's mpirun, or "
                "leave MPI out: unset HVDCORE_CONTROLLER and run srun --mpi=none for hvdcore's "
                "Gloo controller. Tasks meant to train alone: hvd.init(comm=MPI.COMM_SELF)")
    return None
