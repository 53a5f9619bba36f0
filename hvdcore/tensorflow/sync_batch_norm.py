"""``hvd.SyncBatchNormalization``: Keras batch normalization with the job's batch statistics.

Horovod's ``horovod.tensorflow.SyncBatchNormalization``: in training, each rank's batch mean and
variance become the job's before they normalize and update the moving statistics. Horovod's
arithmetic, which weighs every rank alike (exact for the usual equal per-rank batches): the
mean of the ranks' means, and the mean of their ``variance + mean**2`` less the square of that
mean, one Sum allreduce of both divided by the number of ranks. Its gradient flows through the
allreduce, so the input gradients are those of one batch normalization over all ranks' batches.

The class derives from ``tf.keras.layers.BatchNormalization``, whichever Keras that is: Keras 3
from TensorFlow 2.16 on (its ``synchronized=True`` belongs to ``tf.distribute`` and is refused),
tf-keras with ``TF_USE_LEGACY_KERAS=1``, Keras 2 on TensorFlow 2.13-2.15. The fused kernel hides
the batch moments, so ``fused=True`` (or None) is refused, as in Horovod. The class is made on
first use (``hvdcore.tensorflow.SyncBatchNormalization``): importing hvdcore.tensorflow needs no
Keras class (TensorFlow 2.13-2.15 load Keras lazily; the manual's docs-only build stands in for
TensorFlow).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import tensorflow as tf

__all__ = ["group_moments", "sync_batch_normalization_class"]


def group_moments(mean: tf.Tensor, variance: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """The job's mean and variance from this rank's (Horovod's arithmetic: every rank's
    statistics weigh alike); unchanged on a job of one rank."""
    from hvdcore import Sum, global_process_set
    from hvdcore.gradient_rule import reduces_gradients
    from hvdcore.tensorflow.collectives import allreduce
    from hvdcore.tensorflow.scalar_ops import set_size

    if not reduces_gradients(global_process_set):  # one rank, not elastic
        return mean, variance
    # Var[X] = E[X^2] - E[X]^2, both expectations averaged over the ranks in one allreduce
    stacked = tf.stack([mean, variance + tf.math.square(mean)])
    averaged = allreduce(stacked, op=Sum) / set_size(global_process_set, stacked.dtype)
    group_mean, group_mean_of_square = tf.unstack(averaged)
    return group_mean, group_mean_of_square - tf.math.square(group_mean)


@functools.cache
def sync_batch_normalization_class() -> type:
    """The ``SyncBatchNormalization`` class on this process's ``tf.keras`` (made once)."""
    base: Any = tf.keras.layers.BatchNormalization
    keras3 = "reduction_axes" not in inspect.signature(base._moments).parameters

    class SyncBatchNormalization(base):  # type: ignore[misc, valid-type]
        """Batch normalization whose training statistics are every rank's (Horovod's
        ``hvd.SyncBatchNormalization``; see :mod:`hvdcore.tensorflow.sync_batch_norm`)."""

        def __init__(self, fused: bool | None = False, **kwargs: Any) -> None:
            if fused in (True, None):
                raise ValueError("SyncBatchNormalization does not support fused=True (nor None): "
                                 "the fused kernel does not expose the batch moments it must "
                                 "synchronize; pass fused=False or leave it out")
            if keras3:
                if kwargs.get("synchronized"):
                    raise ValueError(
                        "SyncBatchNormalization: synchronized=True is Keras 3's tf.distribute "
                        "synchronization; this layer synchronizes over hvdcore's ranks itself: "
                        "leave synchronized out")
                kwargs.pop("synchronized", None)
            else:
                kwargs["fused"] = False
            super().__init__(**kwargs)

        def _moments(self, *args: Any, **kwargs: Any) -> tuple[tf.Tensor, tf.Tensor]:
            mean, variance = super()._moments(*args, **kwargs)
            return group_moments(mean, variance)

    SyncBatchNormalization.__module__ = __name__
    SyncBatchNormalization.__qualname__ = "SyncBatchNormalization"
    _register(SyncBatchNormalization, base)
    return SyncBatchNormalization


def _register(cls: type, base: type) -> None:
    """Make saved models that hold the layer load without ``custom_objects`` (in the Keras
    the layer belongs to)."""
    package = (base.__module__ or "").split(".")[0]
    if package == "keras":
        import keras

        register = getattr(getattr(keras, "saving", None), "register_keras_serializable", None)
        register = register or keras.utils.register_keras_serializable
    else:
        import importlib

        register = importlib.import_module(package).utils.register_keras_serializable
    register(package="hvdcore", name="SyncBatchNormalization")(cls)
