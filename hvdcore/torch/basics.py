"""Process-level API of the torch binding: init/shutdown, topology queries, capabilities,
process sets and the timeline (the core's, plus the data planes set up by :mod:`.dataplanes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import hvdcore as _core
from hvdcore.docstrings import INIT_ERRORS, PROCESS_SET_RAISES, documented
from hvdcore.torch import dataplanes

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_threads_supported", "mpi_built",
    "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built", "cuda_built", "rocm_built",
    "ddl_built", "ccl_built", "gpu_operations", "cpu_operations", "add_process_set",
    "remove_process_set", "start_timeline", "stop_timeline",
]

is_initialized = _core.is_initialized
rank = _core.rank
size = _core.size
local_rank = _core.local_rank
local_size = _core.local_size
cross_rank = _core.cross_rank
cross_size = _core.cross_size
is_homogeneous = _core.is_homogeneous
mpi_threads_supported = _core.mpi_threads_supported
mpi_built = _core.mpi_built
mpi_enabled = _core.mpi_enabled
gloo_built = _core.gloo_built
gloo_enabled = _core.gloo_enabled
ddl_built = _core.ddl_built
ccl_built = _core.ccl_built
start_timeline = _core.start_timeline
stop_timeline = _core.stop_timeline


@documented(raises=INIT_ERRORS + (
    ("RendezvousError", "torch.distributed's group for the data planes could not be formed "
                        "(on every rank, naming the ranks, address and interface)."),))
def init(comm: Any = None, process_sets: Sequence[Any] | str | None = None) -> None:
    """Start hvdcore (MPI, engine) and its torch data planes (Gloo for CPU tensors when
    ``HVDCORE_CPU_OPERATIONS=gloo``; NCCL/RCCL for device tensors, or host staging).

    Example::

        >>> import hvdcore.torch as hvd
        >>> hvd.init()
        >>> torch.cuda.set_device(hvd.local_rank())   # on GPU nodes  # doctest: +SKIP
    """
    _core.init(comm=comm, process_sets=process_sets)
    dataplanes.setup()


def shutdown() -> None:
    """Stop hvdcore (and the torch.distributed group it created)."""
    planes = dataplanes.current()  # (the engine's: gone from view once it is shut down)
    try:
        _core.shutdown()
    finally:
        dataplanes.shutdown(planes)


@documented(returns="The registered set.", raises=PROCESS_SET_RAISES,
            process_set="A ``ProcessSet`` or a list of world ranks, the same on every rank.")
def add_process_set(process_set: Any) -> Any:
    """Register a process set (a ``ProcessSet`` or a list of ranks) on every rank; returns it.
    Each torch data plane gets its group for the set too."""
    return _core.add_process_set(process_set)


@documented(returns="True when the set was registered and is now removed.",
            raises=PROCESS_SET_RAISES, process_set="A registered ``ProcessSet``.")
def remove_process_set(process_set: Any) -> bool:
    """Unregister a process set on every rank; True if it was registered."""
    return bool(_core.remove_process_set(process_set))


def cuda_built() -> bool:
    """True if this torch was built with CUDA (a GPU may still be absent: see gpu_operations)."""
    return torch.version.cuda is not None


def rocm_built() -> bool:
    """True if this torch was built with ROCm."""
    return torch.version.hip is not None


def nccl_built() -> int:
    """As Horovod's (an int): NCCL_VERSION_CODE (21803 for 2.18.3) when this torch has the NCCL
    (RCCL on ROCm) backend hvdcore uses for device tensors, else 0 (false)."""
    from hvdcore.capabilities import nccl_built as built

    return built()


def gpu_operations() -> str:
    """The active path for device tensors: ``nccl``, ``rccl``, ``mpi-cuda-aware (<why>)``,
    ``mpi-host-staging (<why>)``, or ``refused (<why>)`` when ranks share a GPU (device tensors
    then raise CapabilityError; HVDCORE_GPU_OPERATIONS=mpi stages them instead)."""
    return dataplanes.gpu_path()


def cpu_operations() -> str:
    """The active path for CPU tensors: ``mpi (<why>)`` or ``gloo (<why>)``."""
    return dataplanes.cpu_path()
