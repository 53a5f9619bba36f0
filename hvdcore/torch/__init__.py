"""hvdcore.torch: a drop-in replacement for ``horovod.torch``.

Change ``import horovod.torch as hvd`` to ``import hvdcore.torch as hvd``; the documented names
keep their signatures and semantics. Documented differences: handles are objects rather than
ints; ``DistributedOptimizer`` wraps by composition (``isinstance(opt, torch.optim.SGD)`` is
False, the wrapped optimizer is ``opt.wrapped_optimizer``); ``broadcast_optimizer_state`` never
takes an optimizer step to create lazy state. Gradients of collectives are Horovod's;
``gradient="exact"`` gives the exact derivative of the summed loss instead.

Example::

    import torch
    import hvdcore.torch as hvd

    hvd.init()
    model = torch.nn.Linear(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
"""

from __future__ import annotations

from hvdcore import (
    Adasum,
    Average,
    Max,
    Min,
    ProcessSet,
    Product,
    ReduceOp,
    Sum,
    global_process_set,
)
from hvdcore.errors import HvdcoreError
from hvdcore.torch.basics import (
    add_process_set,
    ccl_built,
    cpu_operations,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    gpu_operations,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from hvdcore.torch.compression import Compression
from hvdcore.torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from hvdcore.torch.handles import Handle, poll, synchronize
from hvdcore.torch.mpi_ops import (
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    reducescatter,
    reducescatter_async,
    sparse_allreduce_async,
)
from hvdcore.torch.optimizer import DistributedOptimizer
from hvdcore.torch.sync_batch_norm import SyncBatchNorm

HorovodInternalError = HvdcoreError
"""Horovod's error root: an alias of :class:`hvdcore.errors.HvdcoreError` (a RuntimeError)."""

from hvdcore.errors import HostsUpdatedInterrupt  # noqa: E402
from hvdcore.torch import elastic  # noqa: E402 - hvd.elastic needs the names above

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_threads_supported",
    "mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built", "cuda_built",
    "rocm_built", "ddl_built", "ccl_built", "gpu_operations", "cpu_operations",
    "ReduceOp", "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_",
    "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async",
    "barrier", "join", "poll", "synchronize", "Handle",
    "broadcast_object", "allgather_object",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "start_timeline", "stop_timeline",
    "Compression", "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state",
    "SyncBatchNorm", "HorovodInternalError", "HostsUpdatedInterrupt", "elastic",
]
