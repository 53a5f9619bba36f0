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

import sys
import warnings
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

import hvdcore as _core
from hvdcore.controllers import elastic_env
from hvdcore.errors import ArgumentError, MismatchError
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


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple, set)) else [value]


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcast the model's and optimizer's variables from ``root_rank`` before training.

    Runs at the start of ``fit`` (the optimizer is built first, so its slots are synced too);
    a model not yet built is broadcast after its first batch. ``local_variables`` (a variable
    or a list) are left as they are on every rank, as in Horovod. In an elastic job it
    broadcasts again in each generation's first ``fit``, on every rank.
    """

    def __init__(self, root_rank: int, device: str = "", local_variables: Any = None) -> None:
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        self._generation: Any = None
        self.local_variables = LocalVariables(_as_list(local_variables))

    def _broadcast(self) -> None:
        variables = [v for v in model_and_optimizer_variables(self.model)
                     if v not in self.local_variables]
        broadcast_variables(variables, self.root_rank)
        self.broadcast_done = True
        self._generation = elastic_env.current()

    def on_train_begin(self, logs: Any = None) -> None:
        if self.broadcast_done and elastic_env.current() is not self._generation:
            # new workers of an elastic job broadcast in their first fit: survivors take part
            self.broadcast_done = False
        if not self.broadcast_done and getattr(self.model, "built", False):
            self._broadcast()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """Replace every epoch-end metric in ``logs`` by its average over all ranks.

    All ranks must report the same metric names; otherwise a MismatchError lists them.
    """

    def __init__(self, device: str = "") -> None:
        super().__init__()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if logs is None:
            return
        mine = {k: float(np.asarray(v)) for k, v in sorted(logs.items())
                if np.asarray(v).size == 1 and np.issubdtype(np.asarray(v).dtype, np.number)}
        everyone = _core.allgather_object(mine)
        names = [sorted(d) for d in everyone]
        if any(n != names[0] for n in names):
            detail = "; ".join(f"rank {r}: {n}" for r, n in enumerate(names))
            raise MismatchError(f"MetricAverageCallback: ranks report different metrics at "
                                f"epoch {epoch}: {detail}")
        for key in mine:
            logs[key] = float(np.mean([d[key] for d in everyone]))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Set the learning rate to ``initial_lr * multiplier(epoch)`` from start_epoch to end_epoch.

    ``multiplier`` is a number or a function of the epoch. With ``staircase=True`` the rate
    changes at epoch boundaries, otherwise every batch (fractional epoch
    ``epoch + batch / steps_per_epoch``). ``momentum_correction`` scales a momentum held in a
    Keras variable by new_lr / old_lr for that batch; Keras 3 optimizers keep momentum as a
    Python float, so there it is skipped with a warning.
    """

    def __init__(self, initial_lr: float, multiplier: float | Callable[[float], float],
                 start_epoch: int = 0, end_epoch: int | None = None, staircase: bool = True,
                 momentum_correction: bool = True, steps_per_epoch: int | None = None,
                 verbose: int = 0) -> None:
        super().__init__()
        if initial_lr is None:
            raise ArgumentError("initial_lr is required (the learning rate the schedule scales)")
        self.initial_lr = float(initial_lr)
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = 0
        self._restore_momentum: float | None = None
        self._warned = False

    def _in_range(self, epoch: int) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _momentum_holder(self) -> Any:
        opt = self.model.optimizer
        return getattr(opt, "inner_optimizer", opt)

    def _adjust(self, epoch: float) -> None:
        opt = self.model.optimizer
        old_lr = float(np.asarray(keras.ops.convert_to_numpy(opt.learning_rate)))
        new_lr = self.initial_lr * float(self.multiplier(epoch))
        opt.learning_rate = new_lr
        if not self.momentum_correction or old_lr <= 0 or new_lr == old_lr:
            return
        momentum = getattr(self._momentum_holder(), "momentum", None)
        if isinstance(momentum, keras.Variable):
            self._restore_momentum = float(keras.ops.convert_to_numpy(momentum))
            momentum.assign(self._restore_momentum * new_lr / old_lr)
        elif momentum and not self._warned:
            self._warned = True
            warnings.warn("LearningRateScheduleCallback: this optimizer's momentum is not a "
                          "variable, so momentum correction is skipped", stacklevel=2)

    def on_train_begin(self, logs: Any = None) -> None:
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")
        if not self.staircase and not self.steps_per_epoch:
            raise ArgumentError("a non-staircase schedule needs steps_per_epoch (fit did not "
                                "report the number of steps; pass steps_per_epoch=...)")

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if not self._in_range(self.current_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._adjust(self.current_epoch)
        else:
            self._adjust(self.current_epoch + float(batch) / float(self.steps_per_epoch or 1))

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._restore_momentum is not None:
            self._momentum_holder().momentum.assign(self._restore_momentum)
            self._restore_momentum = None

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if logs is not None:
            logs["lr"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramp the learning rate from ``initial_lr / size()`` to ``initial_lr`` (Goyal et al.).

    At fractional epoch e < ``warmup_epochs`` the rate is
    ``initial_lr / size * (e * (size - 1) / warmup_epochs + 1)``, updated every batch.
    With ``verbose`` the last warmup epoch prints ``Epoch N: finished gradual learning rate
    warmup to LR.``
    """

    def __init__(self, initial_lr: float, warmup_epochs: int = 5,
                 momentum_correction: bool = True, steps_per_epoch: int | None = None,
                 verbose: int = 0) -> None:
        self.warmup_epochs = warmup_epochs

        def multiplier(epoch: float) -> float:
            n = _core.size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, verbose=verbose)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1 and self.verbose > 0:
            lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {lr:g}.",
                  file=sys.stdout, flush=True)


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """``ModelCheckpoint(save_best_only=True)`` that writes only on rank 0."""

    def __init__(self, filepath: str, monitor: str = "val_loss", verbose: int = 0,
                 mode: str = "auto", save_weights_only: bool = False,
                 save_freq: str | int = "epoch") -> None:
        super().__init__(filepath, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if _core.rank() == 0:
            super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if _core.rank() == 0:
            super().on_epoch_end(epoch, logs)
