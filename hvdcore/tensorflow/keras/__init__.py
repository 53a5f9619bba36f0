"""hvdcore for Keras on TensorFlow: Horovod's ``horovod.tensorflow.keras`` API.

Supports Keras 3 (default in TensorFlow >= 2.16) and tf-keras (``TF_USE_LEGACY_KERAS=1``).
``DistributedOptimizer`` works in compiled ``model.fit``; ``callbacks`` holds
BroadcastGlobalVariablesCallback, MetricAverageCallback, LearningRateWarmupCallback,
LearningRateScheduleCallback and BestModelCheckpoint. Every name of
:mod:`hvdcore.tensorflow` (init, rank, alltoall, ...) is available here too, except that
``allreduce``, ``allgather``, ``broadcast`` and ``reducescatter`` are Horovod's Keras ones
(the value, then ``name``, which names no collective; see
:mod:`hvdcore.tensorflow.keras.collectives`).

Example::

    import keras
    import hvdcore.tensorflow.keras as hvd

    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adadelta(1.0 * hvd.size()))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])
"""

from __future__ import annotations

from hvdcore.tensorflow import *  # noqa: F403  (the whole hvdcore.tensorflow API)
from hvdcore.tensorflow import __all__ as _tf_all

# isort: split
# (after the * import, whose ``elastic`` is hvdcore.tensorflow's: this one replaces it)
import hvdcore.tensorflow.keras.elastic as elastic  # type: ignore[no-redef]
from hvdcore.tensorflow.keras import callbacks
from hvdcore.tensorflow.keras.collectives import (  # type: ignore[assignment]
    allgather,
    allreduce,
    broadcast,
    reducescatter,
)
from hvdcore.tensorflow.keras.optimizer import (  # type: ignore[assignment]  # Keras' own
    DistributedOptimizer,
    PartialDistributedOptimizer,
)
from hvdcore.tensorflow.keras.saving import (
    broadcast_global_variables,
    load_model,
    register_for_broadcast,
)

# (broadcast_global_variables: the Keras form, with an optional model, replaces the TF1 one;
# the four collectives: Horovod's Keras ones replace TensorFlow's)
_REPLACED = ("broadcast_global_variables", "elastic", "allreduce", "allgather", "broadcast",
             "reducescatter")
__all__ = [*(n for n in _tf_all if n not in _REPLACED), "allreduce", "allgather", "broadcast",
           "reducescatter", "callbacks", "elastic",
           "DistributedOptimizer", "PartialDistributedOptimizer", "broadcast_global_variables",
           "load_model", "register_for_broadcast"]
