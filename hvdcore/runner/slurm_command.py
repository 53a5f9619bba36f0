"""Build the ``srun`` command inside a Slurm allocation (``SLURM_JOB_ID`` set).

``srun --mpi=<type> --kill-on-bad-exit=1 --label -n N --export=ALL,HVDCORE_...=... command``:

* ``--mpi``: ``--slurm-mpi`` if given, else ``$SLURM_MPI_TYPE``, else ``pmix`` (works with Open
  MPI 4/5 and recent MPICH; ``pmi2`` fails at MPI init with Debian's Open MPI).
* ``--kill-on-bad-exit=1``: a rank that exits non-zero or dies ends the whole step, so the other
  ranks do not wait in a collective forever.
* ``--label``: each output line starts with its rank (``R: ``), as horovodrun tags every
  line under mpirun; ``--no-tag-output`` leaves it out.
* ``-n``: ``-np`` if given, else the allocation's task count (``SLURM_NTASKS``), else its CPU
  count (``SLURM_JOB_CPUS_PER_NODE``, e.g. ``4(x2),2``). ``-np`` above that is an error.
* ``--export=ALL,...``: the whole environment plus the knob values (a value that contains a
  comma is exported by name, from the launcher's environment, because srun splits on commas).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from hvdcore.errors import LaunchError

__all__ = ["in_allocation", "allocation_slots", "build_srun_command", "DEFAULT_MPI_TYPE"]

DEFAULT_MPI_TYPE = "pmix"


def in_allocation(environ: Mapping[str, str]) -> bool:
    """True inside a Slurm job (``SLURM_JOB_ID`` set)."""
    return bool(environ.get("SLURM_JOB_ID"))


def _cpus_per_node(text: str) -> int:
    total = 0
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise ValueError(part)
        total += int(match.group(1)) * int(match.group(2) or 1)
    return total


def allocation_slots(environ: Mapping[str, str]) -> tuple[int | None, str]:
    """(ranks the allocation allows, where that number comes from); (None, reason) if unknown."""
    for var in ("SLURM_NTASKS", "SLURM_NPROCS"):
        if environ.get(var, "").isdigit():
            return int(environ[var]), var
    text = environ.get("SLURM_JOB_CPUS_PER_NODE")
    if text:
        try:
            return _cpus_per_node(text), "SLURM_JOB_CPUS_PER_NODE"
        except ValueError:
            return None, f"SLURM_JOB_CPUS_PER_NODE={text!r} is not understood"
    return None, "neither SLURM_NTASKS nor SLURM_JOB_CPUS_PER_NODE is set"


def build_srun_command(
    srun: str,
    np: int | None,
    environ: Mapping[str, str],
    exports: Mapping[str, str],
    command: Sequence[str],
    *,
    mpi_type: str | None = None,
    extra_args: Sequence[str] = (),
    label: bool = True,
) -> list[str]:
    """The ``srun`` command line (``label``: srun's rank tag on each line); LaunchError when
    the task count is impossible or unknown."""
    slots, source = allocation_slots(environ)
    job = environ.get("SLURM_JOB_ID", "?")
    if np is None:
        if slots is None:
            raise LaunchError(f"inside Slurm job {job} but -np was not given and {source}; "
                              "pass -np N")
        np = slots
    elif slots is not None and np > slots:
        raise LaunchError(
            f"-np {np} is more than the {slots} task(s) of Slurm job {job} ({source}); ask for "
            f"more (sbatch/salloc -n {np}) or lower -np")
    mpi = mpi_type or environ.get("SLURM_MPI_TYPE") or DEFAULT_MPI_TYPE
    export = ["ALL"] + [f"{k}={v}" if "," not in v else k for k, v in exports.items()]
    return [srun, f"--mpi={mpi}", "--kill-on-bad-exit=1", *(["--label"] if label else []),
            "-n", str(np),
            "--export=" + ",".join(export), *extra_args, *command]
