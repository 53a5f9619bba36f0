"""``hvd.SyncBatchNormalization`` on Keras 3's torch and JAX backends.

The layer of :mod:`hvdcore.tensorflow.sync_batch_norm` (Horovod's, which exists for TensorFlow
only) written with Keras 3 alone: in training, each rank's batch mean and variance become the
job's before they normalize and update the moving statistics, with Horovod's arithmetic (every
rank weighs alike: the mean of the ranks' means, and the mean of their ``variance + mean**2``
less the square of that mean; one Sum allreduce of both, divided by the number of ranks). The
allreduce is the backend's differentiable one (:func:`hvdcore.keras.routing.sum_over_ranks`:
torch's autograd allreduce, or an ordered host callback with a custom gradient inside JAX's
jitted train step), so the input gradients are those of one batch normalization over all ranks'
batches. It saves under the same registered name as the TensorFlow layer
(``hvdcore>SyncBatchNormalization``): a ``.keras`` file loads on either.
"""

from __future__ import annotations

from typing import Any

import keras

import hvdcore
from hvdcore.gradient_rule import reduces_gradients
from hvdcore.keras.routing import sum_over_ranks

__all__ = ["SyncBatchNormalization", "group_moments"]


def group_moments(mean: Any, variance: Any) -> tuple[Any, Any]:
    """The job's mean and variance from this rank's (every rank's statistics weigh alike);
    unchanged on a job of one rank."""
    if not reduces_gradients(hvdcore.global_process_set):  # one rank, not elastic
        return mean, variance
    # Var[X] = E[X^2] - E[X]^2, both expectations averaged over the ranks in one allreduce;
    # a row of ones counts the ranks when the step runs (a traced step outlives an elastic
    # job's resize)
    stacked = keras.ops.stack([mean, variance + keras.ops.square(mean), keras.ops.ones_like(mean)])
    total, total_of_square, ranks = keras.ops.unstack(sum_over_ranks(stacked))
    group_mean = total / ranks
    return group_mean, total_of_square / ranks - keras.ops.square(group_mean)


@keras.saving.register_keras_serializable(package="hvdcore", name="SyncBatchNormalization")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Batch normalization whose training statistics are every rank's (Horovod's
    ``hvd.SyncBatchNormalization``; see :mod:`hvdcore.keras.sync_batch_norm`).

    Takes ``keras.layers.BatchNormalization``'s arguments; ``fused`` is accepted for Horovod
    scripts and must be False (there is no fused kernel to hide the moments), ``synchronized``
    (Keras' own, for ``tf.distribute``) must be left out.
    """

    def __init__(self, fused: bool | None = False, **kwargs: Any) -> None:
        if fused is not False:
            raise ValueError(f"SyncBatchNormalization: fused={fused!r} is not supported: the "
                             "layer synchronizes the batch moments, which a fused kernel does "
                             "not expose; pass fused=False or leave it out")
        if kwargs.pop("synchronized", False):
            raise ValueError("SyncBatchNormalization: synchronized=True is Keras' tf.distribute "
                             "synchronization; this layer synchronizes over hvdcore's ranks "
                             "itself: leave synchronized out")
        super().__init__(**kwargs)

    def _moments(self, inputs: Any, mask: Any) -> tuple[Any, Any]:
        mean, variance = super()._moments(inputs, mask)
        return group_moments(mean, variance)
