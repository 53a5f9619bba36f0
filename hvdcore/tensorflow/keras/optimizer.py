"""``DistributedOptimizer``: pick the wrapper class that matches the optimizer's Keras.

Keras 3 optimizers get :class:`~hvdcore.tensorflow.keras.optimizer_keras3.
Keras3DistributedOptimizer`; Keras 2 optimizers (tf-keras with ``TF_USE_LEGACY_KERAS=1``, or
the Keras 2 that TensorFlow 2.13-2.15 bundle; new and legacy) get
:class:`~hvdcore.tensorflow.keras.optimizer_tf_keras.TfKerasDistributedOptimizer`. Both are
ordinary, statically defined classes that wrap the optimizer by composition.
"""

from __future__ import annotations

from typing import Any

from hvdcore import Average, global_process_set
from hvdcore.arguments import gradient_groups, keras_optimizer_op
from hvdcore.errors import ArgumentError, UnsupportedError
from hvdcore.keras_partial import partial_optimizer
from hvdcore.tensorflow.compression import Compression, Compressor
from hvdcore.tensorflow.keras.flavours import optimizer_flavour

__all__ = ["DistributedOptimizer", "PartialDistributedOptimizer", "is_distributed_optimizer"]


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
                         groups: Any = None, process_set: Any = global_process_set,
                         scale_local_gradients: bool = True) -> Any:
    """Wrap a Keras 3 or tf-keras optimizer so every update uses gradients reduced over ranks.

    Works with ``model.compile(optimizer=...)`` and compiled ``model.fit`` (no need for
    ``run_eagerly=True``). ``backward_passes_per_step=k`` accumulates k local steps before one
    reduction and one update (summed, or averaged with ``average_aggregated_gradients``).
    ``device_dense``, ``device_sparse``, ``num_groups`` and ``groups`` are accepted for Horovod
    compatibility; the core fuses all gradients of a step into one request. ``groups`` is
    checked as Horovod checks it (a positive int or a list, else ValueError); ``num_groups``
    is deprecated (a warning).
    ``optimizer.register_local_var(var)`` keeps ``var``'s gradient local (divided by the set
    size when ``scale_local_gradients``, as Horovod does).

    Example::

        opt = hvd.DistributedOptimizer(keras.optimizers.Adadelta(1.0 * hvd.size()))
        model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    """
    if is_distributed_optimizer(optimizer):
        raise ArgumentError("optimizer is already a DistributedOptimizer; wrap the plain one once")
    gradient_groups(groups, num_groups, "DistributedOptimizer")
    keras_optimizer_op(op)
    kwargs = dict(name=name, compression=compression, sparse_as_dense=sparse_as_dense,
                  gradient_predivide_factor=gradient_predivide_factor, op=op,
                  backward_passes_per_step=backward_passes_per_step,
                  average_aggregated_gradients=average_aggregated_gradients,
                  process_set=process_set, scale_local_gradients=scale_local_gradients)
    flavour = optimizer_flavour(optimizer)
    if flavour == "keras3":
        import keras

        if keras.backend.backend() != "tensorflow":  # hvdcore.keras routes by backend
            raise UnsupportedError(
                f"hvdcore.tensorflow.keras reduces TensorFlow tensors, but Keras' backend is "
                f"{keras.backend.backend()!r} (KERAS_BACKEND); use import hvdcore.keras, which "
                f"picks the implementation for the backend")
        from hvdcore.tensorflow.keras.optimizer_keras3 import Keras3DistributedOptimizer

        return Keras3DistributedOptimizer(optimizer, **kwargs)
    if flavour == "keras2":
        from hvdcore.tensorflow.keras.optimizer_tf_keras import TfKerasDistributedOptimizer

        return TfKerasDistributedOptimizer(optimizer, **kwargs)
    raise UnsupportedError(
        f"DistributedOptimizer wraps a Keras 3 (keras.optimizers.*) or Keras 2 "
        f"(tf_keras.optimizers.*, or tf.keras.optimizers.* on TensorFlow <= 2.15) optimizer, "
        f"got {type(optimizer).__module__}.{type(optimizer).__name__}; for custom training "
        f"loops use DistributedGradientTape"
    )


def PartialDistributedOptimizer(optimizer: Any, name: str | None = None,
                                device_dense: str = "", device_sparse: str = "",
                                compression: type[Compressor] = Compression.none,
                                sparse_as_dense: bool = False,
                                gradient_predivide_factor: float = 1.0, op: Any = Average,
                                groups: Any = None, process_set: Any = global_process_set,
                                local_layers: Any = None, scale_local_gradients: bool = True,
                                backward_passes_per_step: int = 1,
                                average_aggregated_gradients: bool = False) -> Any:
    """A DistributedOptimizer whose ``local_layers`` (a layer or a list) keep local gradients.

    Every trainable weight of those layers is registered with ``register_local_var``: its
    gradient is not reduced over ranks (and is divided by the set size when
    ``scale_local_gradients``). Other arguments are :func:`DistributedOptimizer`'s, in
    Horovod's order (``horovod.keras``); ``backward_passes_per_step`` and
    ``average_aggregated_gradients``, which Horovod's lacks, come last.

    Example::

        opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1),
                                              local_layers=[model.layers[-1]])
    """
    return partial_optimizer(lambda: DistributedOptimizer(
            optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups,
            process_set=process_set, scale_local_gradients=scale_local_gradients), local_layers)
