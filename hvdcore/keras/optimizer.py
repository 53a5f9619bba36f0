"""``DistributedOptimizer`` for Keras 3 on the backends other than TensorFlow (torch, JAX).

The TensorFlow backend has its own classes (:mod:`hvdcore.tensorflow.keras.optimizer`);
:mod:`hvdcore.keras` routes to one or the other by the Keras backend. Here the optimizer is
checked before anything runs: it must be a Keras 3 optimizer of the running Keras (not a
tf-keras one, not one from before a backend switch) on a backend hvdcore.keras supports.
"""

from __future__ import annotations

from typing import Any

from hvdcore import Average, global_process_set
from hvdcore.arguments import gradient_groups, keras_optimizer_op
from hvdcore.errors import ArgumentError, UnsupportedError
from hvdcore.keras.backend import backend, check_unchanged, describe, unsupported
from hvdcore.keras_partial import partial_optimizer

__all__ = ["DistributedOptimizer", "PartialDistributedOptimizer", "is_distributed_optimizer"]


def is_distributed_optimizer(optimizer: Any) -> bool:
    """True if ``optimizer`` is already an hvdcore DistributedOptimizer."""
    return hasattr(optimizer, "reducer") and type(optimizer).__name__ in (
        "EagerDistributedOptimizer", "Keras3DistributedOptimizer", "TfKerasDistributedOptimizer")


def _check_optimizer(optimizer: Any) -> None:
    import keras

    name = check_unchanged()
    if name not in ("torch", "jax"):
        raise unsupported("DistributedOptimizer", name)
    if is_distributed_optimizer(optimizer):
        raise ArgumentError("optimizer is already a DistributedOptimizer; wrap the plain one once")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        origin = type(optimizer).__module__.split(".")[0]
        raise UnsupportedError(
            f"DistributedOptimizer: Keras' backend is {backend()!r}, which trains with Keras 3 "
            f"optimizers (keras.optimizers.*), got {describe(optimizer)}"
            + (" (a tf-keras / TensorFlow optimizer: it would hand TensorFlow tensors to a "
               f"{backend()} model)" if origin in ("tf_keras", "tensorflow") else ""))


def DistributedOptimizer(optimizer: Any, name: str | None = None, device_dense: str = "",
                         device_sparse: str = "", compression: Any = None,
                         sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                         op: Any = Average, backward_passes_per_step: int = 1,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: Any = None, process_set: Any = global_process_set,
                         scale_local_gradients: bool = True) -> Any:
    """Wrap a Keras 3 optimizer so every update uses gradients reduced over ranks.

    The gradients are reduced by the backend's binding (torch: one
    :func:`hvdcore.torch.grouped_allreduce` per update; JAX: one host
    :func:`hvdcore.grouped_allreduce` per update, called from the jitted step).
    ``backward_passes_per_step=k`` accumulates k local steps before one reduction and one update
    (summed, or averaged with ``average_aggregated_gradients``). ``compression`` is
    ``hvdcore.keras.Compression.none`` or ``.fp16``. ``device_dense``, ``device_sparse``,
    ``num_groups`` and ``groups`` are accepted for Horovod compatibility (the core fuses all
    gradients of a step); ``groups`` is checked as Horovod checks it (a positive int or a list, else
    ValueError) and ``num_groups`` is deprecated (a warning).

    Example::

        opt = hvd.DistributedOptimizer(keras.optimizers.Adadelta(1.0 * hvd.size()))
        model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    """
    _check_optimizer(optimizer)
    gradient_groups(groups, num_groups, "DistributedOptimizer")
    keras_optimizer_op(op)
    from hvdcore.keras.eager_optimizer import EagerDistributedOptimizer

    return EagerDistributedOptimizer(
        optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, process_set=process_set,
        scale_local_gradients=scale_local_gradients)


def PartialDistributedOptimizer(optimizer: Any, name: str | None = None,
                                device_dense: str = "", device_sparse: str = "",
                                compression: Any = None, sparse_as_dense: bool = False,
                                gradient_predivide_factor: float = 1.0, op: Any = Average,
                                groups: Any = None, process_set: Any = global_process_set,
                                local_layers: Any = None, scale_local_gradients: bool = True,
                                backward_passes_per_step: int = 1,
                                average_aggregated_gradients: bool = False) -> Any:
    """A DistributedOptimizer whose ``local_layers`` (a layer or a list) keep local gradients
    (divided by the set size when ``scale_local_gradients``); Horovod's argument order, with
    ``backward_passes_per_step`` and ``average_aggregated_gradients`` last.

    Example::

        opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1),
                                              local_layers=[model.layers[-1]])
    """
    return partial_optimizer(lambda: DistributedOptimizer(
            optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, process_set=process_set,
            scale_local_gradients=scale_local_gradients), local_layers)
