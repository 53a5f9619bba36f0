"""``hvdcore.tensorflow.DistributedOptimizer``: Horovod's TensorFlow entry point for an optimizer.

Horovod's ``horovod.tensorflow.DistributedOptimizer`` hands a Keras optimizer on to
``horovod.tensorflow.keras.DistributedOptimizer``; so does this one (TF2 scripts that import
``horovod.tensorflow as hvd`` and compile a Keras model with it). A TF1
``tf.compat.v1.train.Optimizer`` gets :class:`~hvdcore.tensorflow.session_training.
V1DistributedOptimizer`, whose ``compute_gradients`` reduces the gradients over the ranks, or
with ``op=Adasum`` :class:`~hvdcore.tensorflow.delta_adasum.V1AdasumOptimizer` (Horovod's delta
optimizer).
"""

from __future__ import annotations

from typing import Any

from hvdcore import Adasum, Average, global_process_set
from hvdcore.errors import ArgumentError
from hvdcore.tensorflow.compression import Compression, Compressor

__all__ = ["DistributedOptimizer"]


def DistributedOptimizer(optimizer: Any, name: str | None = None, use_locking: bool = False,
                         device_dense: str = "", device_sparse: str = "",
                         compression: type[Compressor] = Compression.none,
                         sparse_as_dense: bool = False, backward_passes_per_step: int = 1,
                         op: Any = Average, gradient_predivide_factor: float = 1.0,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: Any = None, process_set: Any = global_process_set,
                         scale_local_gradients: bool = True) -> Any:
    """Wrap an optimizer (Horovod's TF signature): a Keras one in
    :func:`hvdcore.tensorflow.keras.DistributedOptimizer` with the same options, a
    ``tf.compat.v1.train`` one in :class:`~hvdcore.tensorflow.session_training.
    V1DistributedOptimizer` (``use_locking`` is its; the device arguments are unused)."""
    from hvdcore.tensorflow.delta_adasum import V1AdasumOptimizer
    from hvdcore.tensorflow.session_training import V1DistributedOptimizer, is_v1_optimizer

    if op == Adasum and average_aggregated_gradients:
        raise ArgumentError("Adasum does not take average_aggregated_gradients=True (Horovod's "
                            "rule): the changes it combines are not sums")
    if is_v1_optimizer(optimizer):
        if op == Adasum:
            return V1AdasumOptimizer(optimizer, name=name, use_locking=use_locking,
                                     compression=compression,
                                     backward_passes_per_step=backward_passes_per_step,
                                     process_set=process_set)
        return V1DistributedOptimizer(
            optimizer, name=name, use_locking=use_locking, compression=compression,
            sparse_as_dense=sparse_as_dense, backward_passes_per_step=backward_passes_per_step,
            op=op, gradient_predivide_factor=gradient_predivide_factor,
            average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
            groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    from hvdcore.tensorflow.keras.optimizer import DistributedOptimizer as keras_optimizer

    return keras_optimizer(optimizer, name=name, device_dense=device_dense,
                           device_sparse=device_sparse, compression=compression,
                           sparse_as_dense=sparse_as_dense,
                           gradient_predivide_factor=gradient_predivide_factor, op=op,
                           backward_passes_per_step=backward_passes_per_step,
                           average_aggregated_gradients=average_aggregated_gradients,
                           num_groups=num_groups, groups=groups, process_set=process_set,
                           scale_local_gradients=scale_local_gradients)
