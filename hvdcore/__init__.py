"""hvdcore: Horovod's API on a Python engine over MPI — the NumPy-level core.

Framework bindings: ``hvdcore.torch``, ``hvdcore.tensorflow``, ``hvdcore.tensorflow.keras``
(alias ``hvdcore.keras``). Launcher: ``hvdcorerun``. Configuration: ``hvdcore.config``.

Example (run with ``hvdcorerun -np 2 python script.py``)::

    import numpy as np
    import hvdcore as hvd

    hvd.init()
    mean = hvd.allreduce(np.array([hvd.rank()], np.float64))
    print(hvd.rank(), mean)
"""

from hvdcore import capabilities
from hvdcore.basics import (
    cross_rank,
    cross_size,
    init,
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
    CapabilityError,
    ConfigError,
    HvdcoreError,
    LaunchError,
    MismatchError,
    NotInitializedError,
    RankFailedError,
    ShutdownError,
    StallError,
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

__version__ = "0.1.0"

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "mpi_threads_supported", "start_timeline", "stop_timeline",
    "ReduceOp", "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce", "allreduce_async", "grouped_allreduce", "grouped_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_async", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async", "barrier", "join", "broadcast_object", "allgather_object",
    "poll", "synchronize", "Handle", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set", "HvdcoreError", "ConfigError", "LaunchError", "NotInitializedError",
    "MismatchError", "StallError", "RankFailedError", "CapabilityError", "UnsupportedError",
    "ShutdownError", "__version__", "capabilities", "mpi_built", "mpi_enabled", "gloo_built",
    "gloo_enabled", "nccl_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built",
]
