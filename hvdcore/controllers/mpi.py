"""The MPI controller: mpi4py communicators form the job and carry the engines' agreement."""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from typing import Any

from hvdcore import errors
from hvdcore.controllers.base import Formed
from hvdcore.controllers.mpi_mismatch import launcher_size_mismatch
from hvdcore.malloc_tuning import tune_malloc

__all__ = ["MPIController"]

log = logging.getLogger("hvdcore")


def _world_from(comm: Any) -> Any:
    from mpi4py import MPI

    if comm is None:
        return MPI.COMM_WORLD
    if isinstance(comm, (list, tuple)):
        ranks = sorted(int(r) for r in comm)
        if MPI.COMM_WORLD.Get_rank() not in ranks:
            raise errors.UnsupportedError(
                f"init(comm={ranks}) called on world rank {MPI.COMM_WORLD.Get_rank()}, which is "
                "not in the list: only the listed ranks may call it")
        group = MPI.COMM_WORLD.Get_group().Incl(ranks)
        return MPI.COMM_WORLD.Create_group(group)
    if hasattr(comm, "Get_rank") and hasattr(comm, "Dup"):
        return comm
    raise errors.UnsupportedError(
        f"init(comm=...) expects None, a list of ranks or an mpi4py communicator, got "
        f"{type(comm).__name__}")


def _tunes_hierarchy(cfg: Any) -> bool:
    """Whether the autotuner may switch hierarchical collectives (a knob the user left)."""
    return bool(cfg.autotune) and "default" in (cfg.source("hierarchical_allreduce"),
                                                cfg.source("hierarchical_allgather"))


def host_plane(cfg: Any, world: Any, rank: int) -> Any:
    """The MPI data plane: hierarchical when a knob asks for it or the autotuner may try it
    (decided on every rank alike)."""
    from hvdcore.backends import registry

    wanted = (bool(cfg.hierarchical_allreduce), bool(cfg.hierarchical_allgather),
              _tunes_hierarchy(cfg))
    # The hierarchical plane is built collectively: a rank with other settings would hang.
    seen = world.allgather(wanted) if world.Get_size() > 1 else [wanted]
    if any(w != wanted for w in seen):
        differ = sorted(r for r, w in enumerate(seen) if w != seen[0])
        raise errors.ConfigError(
            "HVDCORE_HIERARCHICAL_ALLREDUCE/ALLGATHER and HVDCORE_AUTOTUNE must be the same on "
            f"every rank: rank 0 has (allreduce, allgather, autotuned) = {seen[0]}, ranks "
            f"{differ} have {[seen[r] for r in differ]}; export the same values to every rank")
    if not any(wanted):
        return registry.create("mpi")
    plane = registry.create("mpi-hierarchical", world, allreduce=wanted[0],
                            allgather=wanted[1], node_id=os.environ.get("SLURM_NODEID"))
    if rank == 0:
        log.info("%s", plane.describe())
    return plane


class MPIController:
    """:class:`~hvdcore.controllers.base.Controller` over mpi4py (the compiled steady call
    and the hierarchical host plane are MPI's)."""

    name = "mpi"
    hierarchical = True
    compiled_steady = True

    def available(self) -> tuple[bool, str]:
        """mpi4py importable (whether libmpi loads is the capability report's question)."""
        if importlib.util.find_spec("mpi4py") is None:
            return False, "mpi4py is not installed (pip install 'hvdcore[mpi]')"
        return True, "mpi4py"

    def form(self, cfg: Any, comm: Any, reason: str, on_rank: Callable[[int], None]) -> Formed:
        """See :meth:`Controller.form`."""
        # The engine thread shares cores with the training thread: let Open MPI yield the CPU
        # while it polls instead of spinning (takes effect only if MPI is not initialized yet;
        # a value set by the user or the site wins).
        os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
        # Open MPI's large allreduces malloc a scratch buffer per call: keep it in the heap.
        malloc_note = tune_malloc(os.environ)
        from mpi4py import MPI

        from hvdcore.backends.mpi_control import MPIControlPlane

        if MPI.Query_thread() < MPI.THREAD_SERIALIZED:
            raise errors.CapabilityError(
                "MPI was initialized with thread level "
                f"{MPI.Query_thread()} (< MPI_THREAD_SERIALIZED); hvdcore's engine thread needs "
                "MPI_THREAD_MULTIPLE: do not set mpi4py.rc.thread_level below 'serialized'")
        world = _world_from(comm)
        rank, size = world.Get_rank(), world.Get_size()
        library = MPI.Get_library_version()
        if comm is None:
            wrong = launcher_size_mismatch(os.environ, size, library)
            if wrong:
                raise errors.CapabilityError(wrong)
        on_rank(rank)
        log.debug("%s", malloc_note)  # (the rank's log is set up by on_rank)
        data = world.Dup()
        local = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        local_rank, local_size = local.Get_rank(), local.Get_size()
        cross = world.Split(local_rank, rank)
        plane = MPIControlPlane(world, rounds=cfg.cache_capacity > 0)
        return Formed("mpi", reason, world, rank, size, local_rank, local_size,
                      cross.Get_rank(), cross.Get_size(), data, plane,
                      host_plane(cfg, world, rank), comms=[local, cross],
                      describe=f"MPI ({library.splitlines()[0].strip()})")
