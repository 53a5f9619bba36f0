"""A launcher and an MPI library that do not belong together: every rank alone.

When mpi4py loads another MPI library than the one whose launcher started the job (MPICH's
``mpiexec`` with mpi4py on Open MPI, or the reverse), ``MPI_Init`` does not find the job and
each process becomes a world of one: N copies of rank 0 of 1, each training alone, a silent
wrong answer. The launcher's own variables still say how many ranks it started, so
:func:`launcher_size_mismatch` compares them with ``MPI_COMM_WORLD``'s size and
:class:`~hvdcore.controllers.mpi.MPIController` refuses the job with its text, on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["launcher_size_mismatch"]

# (variable, who sets it): the size of the job the launcher started
_SIZES = (("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
          ("PMI_SIZE", "a PMI launcher (MPICH/Intel MPI mpiexec, srun --mpi=pmi2)"))


def launcher_size_mismatch(environ: Mapping[str, str], world_size: int,
                           library: str) -> str | None:
    """Why this process cannot be one rank of its job, or None: the launcher started more
    than one rank (its variables) while ``MPI_COMM_WORLD`` (of the MPI library whose version
    string is ``library``) holds this process alone."""
    if world_size != 1:
        return None
    for variable, who in _SIZES:
        value = environ.get(variable, "").strip()
        if value.isdigit() and int(value) > 1:
            name = library.strip().splitlines()[0].strip() if library.strip() else "unknown"
            return (f"{who} started {value} ranks ({variable}={value}), but MPI_COMM_WORLD "
                    f"holds this process alone: mpi4py loaded another MPI library ({name}) "
                    "than the launcher's, and every rank would run as rank 0 of 1. Launch "
                    "with the mpirun of the library mpi4py uses, or point mpi4py at the "
                    "launcher's library (MPI4PY_LIBMPI=/path/to/libmpi.so.N, mpi4py >= 4; "
                    "or an mpi4py built against it)")
    return None
