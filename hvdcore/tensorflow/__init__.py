"""hvdcore for TensorFlow 2: Horovod's ``horovod.tensorflow`` API on the hvdcore runtime.

Collectives take tf.Tensor / tf.Variable (and Keras variables), run eagerly or inside
``tf.function`` (one ``tf.numpy_function`` op per call; static shapes kept where known), and
return tf.Tensor. ``DistributedGradientTape`` averages gradients over ranks;
``broadcast_variables`` syncs initial state. Importing this package does not import PyTorch.

Example::

    import tensorflow as tf
    import hvdcore.tensorflow as hvd

    hvd.init()
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.build((None, 4))
    hvd.broadcast_variables(model.variables, root_rank=0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(tf.ones([8, 4])))
    grads = hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
"""

from __future__ import annotations

from typing import Any

from hvdcore import (
    Adasum,
    Average,
    Max,
    Min,
    ProcessSet,
    Product,
    ReduceOp,
    Sum,
    add_process_set,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    global_process_set,
    gloo_built,
    gloo_enabled,
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
    size,
    start_timeline,
    stop_timeline,
)
from hvdcore.errors import HvdcoreError as HorovodInternalError
from hvdcore.tensorflow import elastic
from hvdcore.tensorflow.collectives import (
    allgather,
    allgather_object,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    broadcast_,
    broadcast_object,
    broadcast_object_fn,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    join,
    local_rank_op,
    local_size_op,
    process_set_included_op,
    rank_op,
    reducescatter,
    size_op,
)
from hvdcore.tensorflow.compression import Compression
from hvdcore.tensorflow.device_path import init, shutdown
from hvdcore.tensorflow.gradients import DistributedGradientTape, PartialDistributedGradientTape
from hvdcore.tensorflow.optimizer import DistributedOptimizer
from hvdcore.tensorflow.session_training import BroadcastGlobalVariablesHook
from hvdcore.tensorflow.variables import broadcast_global_variables, broadcast_variables

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_threads_supported", "mpi_built",
    "mpi_enabled", "gloo_built", "gloo_enabled", "nccl_built", "cuda_built", "rocm_built",
    "ddl_built", "ccl_built", "ReduceOp", "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
    "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter", "barrier", "join",
    "broadcast_object", "broadcast_object_fn", "allgather_object", "size_op", "rank_op",
    "local_size_op", "local_rank_op", "process_set_included_op", "ProcessSet",
    "global_process_set", "add_process_set", "remove_process_set", "Compression",
    "DistributedGradientTape", "DistributedOptimizer", "PartialDistributedGradientTape",
    "broadcast_variables", "broadcast_global_variables",
    "start_timeline", "stop_timeline", "HorovodInternalError", "elastic",
    "BroadcastGlobalVariablesHook",
]
# (SyncBatchNormalization is an attribute, made on first use, and not in __all__: a star import,
# as hvdcore.tensorflow.keras makes, would make it, looking Keras up)


def __getattr__(name: str) -> Any:
    """``SyncBatchNormalization``, made on first use (it derives from a Keras class, which is
    looked up only when it is asked for)."""
    if name == "SyncBatchNormalization":
        from hvdcore.tensorflow.sync_batch_norm import sync_batch_normalization_class

        return sync_batch_normalization_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
