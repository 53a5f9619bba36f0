"""Keras callbacks for distributed training (Horovod's ``hvd.callbacks`` names and semantics).

The callbacks derive from ``tf.keras.callbacks.Callback``, i.e. Keras 3 by default and tf-keras
when ``TF_USE_LEGACY_KERAS=1`` is set before TensorFlow is imported (TensorFlow 2.13-2.15: their
Keras 2). Put
``MetricAverageCallback`` before callbacks that read metrics (checkpointing, early stopping).

Example::

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1 * hvd.size(), warmup_epochs=3),
    ]
    if hvd.rank() == 0:
        callbacks.append(hvd.callbacks.BestModelCheckpoint(filepath="best.keras"))
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from hvdcore.callback_logic import (
    BroadcastLogic,
    LearningRateScheduleLogic,
    LearningRateWarmupLogic,
    MetricAverageLogic,
    RankZeroCheckpointLogic,
)
from hvdcore.tensorflow.keras.aggregation import LocalVariables
from hvdcore.tensorflow.keras.flavours import keras_major
from hvdcore.tensorflow.variables import broadcast_variables

__all__ = [
    "BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateScheduleCallback",
    "LearningRateWarmupCallback", "BestModelCheckpoint", "model_and_optimizer_variables",
]

# the Keras TensorFlow picks: Keras 3, or tf-keras with TF_USE_LEGACY_KERAS=1 (or the Keras 2
# of TensorFlow <= 2.15)
_Callback: Any = tf.keras.callbacks.Callback
_ModelCheckpoint: Any = tf.keras.callbacks.ModelCheckpoint


def _optimizer_variables(optimizer: Any, model: Any) -> list[Any]:
    if optimizer is None:
        return []
    built = getattr(optimizer, "built", None)
    if built is None:
        built = getattr(optimizer, "_built", False)
    if (not built and hasattr(optimizer, "build") and getattr(model, "built", False)
            and model.trainable_variables):
        optimizer.build(model.trainable_variables)  # legacy OptimizerV2 has no build()
    variables = optimizer.variables
    if callable(variables) and not isinstance(variables, list):
        variables = variables()
    return list(variables)


def model_and_optimizer_variables(model: Any) -> list[Any]:
    """The model's variables followed by its optimizer's (the optimizer is built if needed)."""
    return list(model.variables) + _optimizer_variables(getattr(model, "optimizer", None), model)


class _TensorFlowHooks:
    """:class:`hvdcore.callback_logic.KerasHooks` for ``tf.keras``."""

    variables = staticmethod(model_and_optimizer_variables)
    broadcast = staticmethod(broadcast_variables)
    local_variables = staticmethod(LocalVariables)

    @staticmethod
    def number(value: Any) -> float:
        return float(np.asarray(value))

    @staticmethod
    def is_variable(value: Any) -> bool:
        return isinstance(value, tf.Variable)


class BroadcastGlobalVariablesCallback(BroadcastLogic, _Callback):
    __doc__ = BroadcastLogic.__doc__
    _hooks = _TensorFlowHooks()


class MetricAverageCallback(MetricAverageLogic, _Callback):
    __doc__ = MetricAverageLogic.__doc__


class LearningRateScheduleCallback(LearningRateScheduleLogic, _Callback):
    __doc__ = LearningRateScheduleLogic.__doc__
    _hooks = _TensorFlowHooks()


class LearningRateWarmupCallback(LearningRateWarmupLogic, LearningRateScheduleCallback):
    __doc__ = LearningRateWarmupLogic.__doc__


class BestModelCheckpoint(RankZeroCheckpointLogic, _ModelCheckpoint):
    __doc__ = RankZeroCheckpointLogic.__doc__

    def _save_model(self, *args: Any, **kwargs: Any) -> Any:
        # Keras 2.13 (TensorFlow 2.13's) saves the best model with SaveOptions, which its own
        # .keras format refuses; its later releases (tf-keras) leave them out for .keras files.
        if (hasattr(self, "_save_handler") or keras_major() >= 3 or self.save_weights_only
                or not str(self.filepath).endswith(".keras")):
            return super()._save_model(*args, **kwargs)
        model = self.model
        self.set_model(_WithoutSaveOptions(model))
        try:
            return super()._save_model(*args, **kwargs)
        finally:
            self.set_model(model)


class _WithoutSaveOptions:
    """``model``, except that ``save`` drops the ``options`` it is given."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def save(self, filepath: Any, overwrite: bool = True, options: Any = None,
             **kwargs: Any) -> Any:
        return self._model.save(filepath, overwrite=overwrite, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

