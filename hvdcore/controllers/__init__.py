"""Controllers: how the ranks of a job find each other and agree on what to run.

A controller forms the job (ranks, the node layout, the engine's control plane and host data
plane) and is registered here by name. The engine never imports one: ``hvdcore.init()`` asks
:func:`choose` which controller this process takes and why, then :func:`get` for it.

======== ========================================================================= ==========
name     what it uses                                                              module
======== ========================================================================= ==========
``mpi``  mpi4py communicators; started by ``mpirun``/``srun --mpi=pmix``          ``mpi``
``gloo`` torch.distributed: a TCPStore rendezvous, Gloo process groups; started   ``gloo``
         by ``hvdcorerun --gloo``, ``torchrun`` or a plain ``srun``
======== ========================================================================= ==========

Adding a controller: its module with a class that implements
:class:`~hvdcore.controllers.base.Controller`, one entry in :data:`REGISTRY`, and, where it
launches, the launcher.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from typing import Any

from hvdcore.controllers.base import Controller, Formed
from hvdcore.errors import CapabilityError, ConfigError

__all__ = ["REGISTRY", "Controller", "Formed", "choose", "get", "launched_by"]

REGISTRY: dict[str, str] = {
    "mpi": "hvdcore.controllers.mpi:MPIController",
    "gloo": "hvdcore.controllers.gloo:GlooController",
}
"""Controller name -> ``module:class`` (imported only when chosen or asked about)."""

# Variables an MPI or PMIx launcher gives every rank (Open MPI, MPICH/Hydra, Intel MPI, PMIx
# under srun --mpi=pmix). Slurm's own SLURM_* are not among them: a plain srun sets those too.
_MPI_LAUNCH = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
               "HYDI_CONTROL_FD")
# torchrun (and torch's elastic agent), hvdcorerun --gloo / horovodrun --gloo
_GLOO_LAUNCH = ("TORCHELASTIC_RUN_ID", "HOROVOD_GLOO_RENDEZVOUS_ADDR")


def get(name: str) -> Controller:
    """The registered controller ``name`` (ConfigError naming the known ones otherwise)."""
    try:
        target = REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown controller {name!r}: known controllers are "
                          f"{', '.join(sorted(REGISTRY))}") from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)()


def launched_by(environ: Mapping[str, str]) -> str | None:
    """Which kind of launcher started this process, from its variables: ``"mpi"``,
    ``"gloo"`` (torchrun, hvdcorerun --gloo), ``"slurm"`` (srun without PMI), or None."""
    if any(v in environ for v in _MPI_LAUNCH):
        return "mpi"
    if any(v in environ for v in _GLOO_LAUNCH) or (
            "RANK" in environ and "WORLD_SIZE" in environ and "MASTER_ADDR" in environ):
        return "gloo"
    if "SLURM_PROCID" in environ and "SLURM_NTASKS" in environ:
        return "slurm"
    return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def choose(setting: str, source: str, environ: Mapping[str, str], comm: Any = None
           ) -> tuple[str, str]:
    """``(controller name, why)`` for this process: the rule of ``HVDCORE_CONTROLLER``.

    ``setting``/``source``: the knob's value and where it came from; ``comm``: what
    ``init(comm=...)`` was given (an mpi4py communicator means MPI).
    """
    if setting in ("mpi", "gloo"):
        return setting, f"{source}={setting}"
    if comm is not None and hasattr(comm, "Get_rank"):
        return "mpi", "init(comm=...) was given an mpi4py communicator"
    has_mpi = _importable("mpi4py")
    has_torch = _importable("torch")
    launcher = launched_by(environ)
    if launcher == "mpi":
        if has_mpi:
            return "mpi", "an MPI/PMIx launcher started this rank and mpi4py imports"
        if has_torch and "SLURM_PROCID" in environ:
            return "gloo", "srun started this rank (with PMI) but mpi4py is not installed"
        raise CapabilityError(
            "an MPI launcher started this rank but mpi4py is not installed: pip install "
            "'hvdcore[mpi]' (with an MPI library), or launch with hvdcorerun --gloo / torchrun")
    if launcher in ("gloo", "slurm"):
        if not has_torch:
            raise CapabilityError(
                f"{'srun' if launcher == 'slurm' else 'torchrun/hvdcorerun --gloo'} started "
                "this rank for the Gloo controller, which needs torch: pip install "
                "'hvdcore[torch]'")
        what = {"gloo": "torchrun or hvdcorerun --gloo", "slurm": "srun without PMI"}[launcher]
        return "gloo", f"{what} started this rank"
    if has_mpi:
        return "mpi", "a lone process (no launcher's variables) and mpi4py imports"
    if has_torch:
        return "gloo", "a lone process (no launcher's variables) and no mpi4py"
    raise CapabilityError("no controller can run here: install mpi4py (pip install "
                          "'hvdcore[mpi]') or torch (pip install 'hvdcore[torch]')")
