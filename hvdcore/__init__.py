"""hvdcore: Horovod's API on a Python engine over MPI — the NumPy-level core.

Framework bindings: ``hvdcore.torch``, ``hvdcore.tensorflow``, ``hvdcore.tensorflow.keras``
(alias ``hvdcore.keras``). Launcher: ``hvdcorerun``, and ``hvdcore.run(func, np=N)`` (Horovod's
``horovod.run``) for a Python function. Configuration: ``hvdcore.config``.

Example (run with ``hvdcorerun -np 2 python script.py``)::

    import numpy as np
    import hvdcore as hvd

    hvd.init()
    mean = hvd.allreduce(np.array([hvd.rank()], np.float64))
    print(hvd.rank(), mean)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.3.0.dev0"

# Public name -> the module that defines it. Nothing is imported until a name is used, so that
# the launcher (``hvdcorerun --help``, ``--check-build``) loads only what it needs.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys((
        "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
        "cross_rank", "cross_size", "is_homogeneous", "mpi_threads_supported",
        "start_timeline", "stop_timeline"), "hvdcore.basics"),
    **dict.fromkeys((
        "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built", "cuda_built",
        "rocm_built", "ddl_built", "ccl_built"), "hvdcore.capabilities"),
    "Handle": "hvdcore.engine.handle",
    "ReduceOp": "hvdcore.engine.messages",
    **dict.fromkeys((
        "HvdcoreError", "ConfigError", "LaunchError", "NotInitializedError", "MismatchError",
        "StallError", "RankFailedError", "CapabilityError", "UnsupportedError",
        "ShutdownError", "ArgumentError", "UnimplementedError", "RendezvousError",
        "HostsUpdatedInterrupt"), "hvdcore.errors"),
    **dict.fromkeys(("broadcast_object", "allgather_object"), "hvdcore.objects"),
    **dict.fromkeys((
        "Average", "Sum", "Adasum", "Min", "Max", "Product", "allreduce", "allreduce_async",
        "grouped_allreduce", "grouped_allreduce_async", "allgather", "allgather_async",
        "grouped_allgather", "grouped_allgather_async", "broadcast", "broadcast_async",
        "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
        "grouped_reducescatter", "grouped_reducescatter_async", "barrier", "join", "poll",
        "synchronize", "add_process_set", "remove_process_set"), "hvdcore.ops"),
    **dict.fromkeys(("ProcessSet", "global_process_set"), "hvdcore.process_sets"),
    "run": "hvdcore.runner.func_job",
}
_SUBMODULES = ("capabilities",)

__all__ = [*_EXPORTS, *_SUBMODULES, "__version__"]


def __getattr__(name: str) -> Any:
    """Import the module behind a public name on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"hvdcore.{name}")
    else:
        raise AttributeError(f"module 'hvdcore' has no attribute {name!r}")
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what static tools see: the same names, imported eagerly
    # ruff: noqa: F401 (re-exports; __all__ is built from _EXPORTS)
    from hvdcore import capabilities
    from hvdcore.basics import (
        cross_rank,
        cross_size,
        init,
        is_homogeneous,
        is_initialized,
        local_rank,
        local_size,
        mpi_threads_supported,
        rank,
        shutdown,
        size,
        start_timeline,
        stop_timeline,
    )
    from hvdcore.capabilities import (
        ccl_built,
        cuda_built,
        ddl_built,
        gloo_built,
        gloo_enabled,
        mpi_built,
        mpi_enabled,
        nccl_built,
        rocm_built,
    )
    from hvdcore.engine.handle import Handle
    from hvdcore.engine.messages import ReduceOp
    from hvdcore.errors import (
        ArgumentError,
        CapabilityError,
        ConfigError,
        HostsUpdatedInterrupt,
        HvdcoreError,
        LaunchError,
        MismatchError,
        NotInitializedError,
        RankFailedError,
        RendezvousError,
        ShutdownError,
        StallError,
        UnimplementedError,
        UnsupportedError,
    )
    from hvdcore.objects import allgather_object, broadcast_object
    from hvdcore.ops import (
        Adasum,
        Average,
        Max,
        Min,
        Product,
        Sum,
        add_process_set,
        allgather,
        allgather_async,
        allreduce,
        allreduce_async,
        alltoall,
        alltoall_async,
        barrier,
        broadcast,
        broadcast_async,
        grouped_allgather,
        grouped_allgather_async,
        grouped_allreduce,
        grouped_allreduce_async,
        grouped_reducescatter,
        grouped_reducescatter_async,
        join,
        poll,
        reducescatter,
        reducescatter_async,
        remove_process_set,
        synchronize,
    )
    from hvdcore.process_sets import ProcessSet, global_process_set
    from hvdcore.runner.func_job import run
