"""A real MPICH for the tests: the ``mpich`` wheel from PyPI (MPICH 5.0.2, its Hydra
``mpirun`` and ``libmpi.so.12``), installed once into a prefix of its own.

Its own prefix, never the suite's venv: there its ``mpirun`` would shadow Open MPI's, and
mpi4py (whose PyPI wheel carries an Open MPI and an MPICH build and picks one at import) would
find its library first. A test chooses MPICH for a job by putting :func:`bin_dir` first on
``PATH`` and, for ranks that use MPI, ``MPI4PY_LIBMPI`` = :func:`libmpi` (:func:`environ`).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["VERSION", "PREFIX", "install", "environ"]

VERSION = "5.0.2"
PREFIX = Path(f"/var/tmp/hvdcore-mpich-{VERSION}")


def install() -> Path:
    """The prefix, with MPICH installed (pip, ~13 MB, the first time; one installer at a time
    across the suite's workers)."""
    mpirun = PREFIX / "bin" / "mpirun"
    PREFIX.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{PREFIX}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not mpirun.exists():
            out = subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                 "--disable-pip-version-check", "--prefix", str(PREFIX), f"mpich=={VERSION}"],
                capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                raise RuntimeError(f"pip install mpich=={VERSION} failed:\n"
                                   f"{out.stdout}{out.stderr}")
    version = subprocess.run([str(mpirun), "--version"], capture_output=True, text=True,
                             timeout=30)
    if "HYDRA build details" not in version.stdout:
        raise RuntimeError(f"{mpirun} is no Hydra:\n{version.stdout}{version.stderr}")
    return PREFIX


def environ(base: dict[str, str], use_library: bool = True) -> dict[str, str]:
    """``base`` with MPICH's ``mpirun`` first on PATH and, with ``use_library``, mpi4py on
    MPICH's library; no variable of another launcher or of Open MPI's singleton mode."""
    env = {k: v for k, v in base.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_", "HYDI_", "MPI4PY_"))}
    env["PATH"] = f"{PREFIX / 'bin'}{os.pathsep}{base.get('PATH', '/usr/bin:/bin')}"
    if use_library:
        env["MPI4PY_LIBMPI"] = str(PREFIX / "lib" / "libmpi.so.12")
    return env
