"""Keras 3 callbacks for distributed training on any Keras backend (used off TensorFlow).

The same names, arguments and semantics as :mod:`hvdcore.tensorflow.keras.callbacks` (Horovod's
``hvd.callbacks``), built on ``keras.callbacks.Callback`` only: variables are broadcast by the
backend's binding (:func:`hvdcore.keras.routing.broadcast_variables`), metrics averaged with
``allgather_object``. Put ``MetricAverageCallback`` before callbacks that read metrics.

Example::

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(),
                 hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1 * hvd.size())]
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from hvdcore.callback_logic import (
    BroadcastLogic,
    LearningRateScheduleLogic,
    LearningRateWarmupLogic,
    MetricAverageLogic,
    RankZeroCheckpointLogic,
)
from hvdcore.keras.eager_optimizer import LocalVariables
from hvdcore.keras.routing import broadcast_variables

__all__ = [
    "BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateScheduleCallback",
    "LearningRateWarmupCallback", "BestModelCheckpoint", "model_and_optimizer_variables",
]


def model_and_optimizer_variables(model: Any) -> list[Any]:
    """The model's variables followed by its optimizer's (the optimizer is built if needed)."""
    optimizer = getattr(model, "optimizer", None)
    variables = list(model.variables)
    if optimizer is None:
        return variables
    if not optimizer.built and getattr(model, "built", False) and model.trainable_variables:
        optimizer.build(model.trainable_variables)
    return variables + list(optimizer.variables)


class _PortableHooks:
    """:class:`hvdcore.callback_logic.KerasHooks` for Keras 3 on any backend."""

    variables = staticmethod(model_and_optimizer_variables)
    broadcast = staticmethod(broadcast_variables)
    local_variables = staticmethod(LocalVariables)

    @staticmethod
    def number(value: Any) -> float:
        return float(np.asarray(keras.ops.convert_to_numpy(value)))

    @staticmethod
    def is_variable(value: Any) -> bool:
        return isinstance(value, keras.Variable)


class BroadcastGlobalVariablesCallback(BroadcastLogic, keras.callbacks.Callback):
    __doc__ = BroadcastLogic.__doc__
    _hooks = _PortableHooks()


class MetricAverageCallback(MetricAverageLogic, keras.callbacks.Callback):
    __doc__ = MetricAverageLogic.__doc__


class LearningRateScheduleCallback(LearningRateScheduleLogic, keras.callbacks.Callback):
    __doc__ = LearningRateScheduleLogic.__doc__
    _hooks = _PortableHooks()


class LearningRateWarmupCallback(LearningRateWarmupLogic, LearningRateScheduleCallback):
    __doc__ = LearningRateWarmupLogic.__doc__


class BestModelCheckpoint(RankZeroCheckpointLogic, keras.callbacks.ModelCheckpoint):
    __doc__ = RankZeroCheckpointLogic.__doc__
