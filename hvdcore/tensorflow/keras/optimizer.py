"""``DistributedOptimizer``: pick the wrapper class that matches the optimizer's Keras.

Keras 3 optimizers get :class:`~hvdcore.tensorflow.keras.optimizer_keras3.
Keras3DistributedOptimizer`, tf-keras optimizers (``TF_USE_LEGACY_KERAS=1``, new and legacy)
get :class:`~hvdcore.tensorflow.keras.optimizer_tf_keras.TfKerasDistributedOptimizer`. Both are
ordinary, statically defined classes that wrap the optimizer by composition.
"""

from __future__ import annotations

from typing import Any

from hvdcore import Average, global_process_set
from hvdcore.errors import ArgumentError, UnsupportedError
from hvdcore.tensorflow.compression import Compression, Compressor

__all__ = ["DistributedOptimizer", "is_distributed_optimizer"]


def _flavour(optimizer: Any) -> str:
    for cls in type(optimizer).__mro__:
        module = cls.__module__ or ""
        if module.startswith("tf_keras."):
            return "tf_keras"
        if module.startswith("keras."):
            return "keras3"
    return "unknown"


def is_distributed_optimizer(optimizer: Any) -> bool:
    """True if ``optimizer`` is already an hvdcore DistributedOptimizer."""
    return hasattr(optimizer, "reducer") and type(optimizer).__name__ in (
        "Keras3DistributedOptimizer", "TfKerasDistributedOptimizer")


def DistributedOptimizer(optimizer: Any, name: str | None = None, device_dense: str = "",
                         device_sparse: str = "",
                         compression: type[Compressor] = Compression.none,
                         sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                         op: Any = Average, backward_passes_per_step: int = 1,
                         average_aggregated_gradients: bool = False, num_groups: int = 0,
                         groups: Any = None, process_set: Any = global_process_set) -> Any:
    """Wrap a Keras 3 or tf-keras optimizer so every update uses gradients reduced over ranks.

    Works with ``model.compile(optimizer=...)`` and compiled ``model.fit`` (no need for
    ``run_eagerly=True``). ``backward_passes_per_step=k`` accumulates k local steps before one
    reduction and one update (summed, or averaged with ``average_aggregated_gradients``).
    ``device_dense``, ``device_sparse``, ``num_groups`` and ``groups`` are accepted for Horovod
    compatibility; the core fuses all gradients of a step into one request.

    Example::

        opt = hvd.DistributedOptimizer(keras.optimizers.Adadelta(1.0 * hvd.size()))
        model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    """
    if is_distributed_optimizer(optimizer):
        raise ArgumentError("optimizer is already a DistributedOptimizer; wrap the plain one once")
    kwargs = dict(name=name, compression=compression, sparse_as_dense=sparse_as_dense,
                  gradient_predivide_factor=gradient_predivide_factor, op=op,
                  backward_passes_per_step=backward_passes_per_step,
                  average_aggregated_gradients=average_aggregated_gradients,
                  process_set=process_set)
    flavour = _flavour(optimizer)
    if flavour == "keras3":
        from hvdcore.tensorflow.keras.optimizer_keras3 import Keras3DistributedOptimizer

        return Keras3DistributedOptimizer(optimizer, **kwargs)
    if flavour == "tf_keras":
        from hvdcore.tensorflow.keras.optimizer_tf_keras import TfKerasDistributedOptimizer

        return TfKerasDistributedOptimizer(optimizer, **kwargs)
    raise UnsupportedError(
        f"DistributedOptimizer wraps a Keras 3 (keras.optimizers.*) or tf-keras "
        f"(tf_keras.optimizers.*) optimizer, got {type(optimizer).__module__}."
        f"{type(optimizer).__name__}; for custom training loops use DistributedGradientTape"
    )
