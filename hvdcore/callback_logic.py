"""What hvdcore's Keras callbacks do, written once for both Keras bindings.

:mod:`hvdcore.tensorflow.keras.callbacks` (``tf.keras``: Keras 3 or tf-keras) and
:mod:`hvdcore.keras.portable_callbacks` (Keras 3 on torch or JAX) each build their public
callbacks from a mixin here and their Keras' base class, and say through a
:class:`KerasHooks` object what differs by framework: how a model's variables are listed and
broadcast, which objects are variables and how a number is read from one. The mixins import
no framework.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from hvdcore.basics import rank, size
from hvdcore.controllers import elastic_env
from hvdcore.errors import ArgumentError, MismatchError
from hvdcore.keras_partial import as_list
from hvdcore.objects import allgather_object

__all__ = ["KerasHooks", "BroadcastLogic", "MetricAverageLogic", "LearningRateScheduleLogic",
           "LearningRateWarmupLogic", "RankZeroCheckpointLogic"]


class KerasHooks(Protocol):
    """What a Keras binding tells the callback mixins (its class attribute ``_hooks``)."""

    def variables(self, model: Any) -> list[Any]:
        """The model's variables followed by its optimizer's (built if needed)."""

    def broadcast(self, variables: list[Any], root_rank: int) -> None:
        """Assign ``root_rank``'s values to ``variables`` on every rank."""

    def local_variables(self) -> Any:
        """An empty set of variables (``add`` and ``in``) that the broadcast leaves alone."""

    def number(self, value: Any) -> float:
        """A scalar variable's or tensor's value."""

    def is_variable(self, value: Any) -> bool:
        """Whether ``value`` is one of the framework's assignable variables."""


class BroadcastLogic:
    """Broadcast the model's and optimizer's variables from ``root_rank`` before training.

    Runs at the start of ``fit`` (the optimizer is built first, so its slots are synced too);
    a model that is not yet built is broadcast after its first batch instead.
    ``local_variables`` (a variable or a list of variables; anything else is a ValueError, as
    in Horovod) are left as they are on every rank (e.g. the weights of model-parallel
    layers). In an elastic job it broadcasts again
    in each generation's first ``fit``, on every rank.
    """

    _hooks: KerasHooks
    model: Any

    def __init__(self, root_rank: int, device: str = "", local_variables: Any = None) -> None:
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        self._generation: Any = None
        self.local_variables = self._hooks.local_variables()
        variables = as_list(local_variables)
        for var in variables:
            if not callable(getattr(var, "assign", None)):
                # as Horovod (ValueError): a value has no identity to leave out
                raise ArgumentError(
                    f"BroadcastGlobalVariablesCallback: local_variables must be variables "
                    f"(tf.Variable, keras.Variable), got {type(var).__name__}")
        for var in variables:
            self.local_variables.add(var)

    def _broadcast(self) -> None:
        variables = [v for v in self._hooks.variables(self.model)
                     if v not in self.local_variables]
        self._hooks.broadcast(variables, self.root_rank)
        self.broadcast_done = True
        self._generation = elastic_env.current()

    def on_train_begin(self, logs: Any = None) -> None:
        if self.broadcast_done and elastic_env.current() is not self._generation:
            # an elastic job's new workers broadcast in their first fit: the survivors, whose
            # flag is from an earlier generation, must take part (Horovod's would wait)
            self.broadcast_done = False
        if not self.broadcast_done and getattr(self.model, "built", False):
            self._broadcast()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageLogic:
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
        everyone = allgather_object(mine)
        names = [sorted(d) for d in everyone]
        if any(n != names[0] for n in names):
            detail = "; ".join(f"rank {r}: {n}" for r, n in enumerate(names))
            raise MismatchError(f"MetricAverageCallback: ranks report different metrics at "
                                f"epoch {epoch}: {detail}")
        for key in mine:
            logs[key] = float(np.mean([d[key] for d in everyone]))


class LearningRateScheduleLogic:
    """Set the learning rate to ``initial_lr * multiplier(epoch)`` from start_epoch to end_epoch.

    ``multiplier`` is a function of the epoch, or a number m (Horovod's exponential decay:
    ``m ** epoch``). With ``staircase=True`` the rate
    changes at epoch boundaries; otherwise every batch, using the fractional epoch
    ``epoch + batch / steps_per_epoch`` (``steps_per_epoch`` defaults to the number of steps
    ``fit`` reports). ``momentum_correction`` scales an assignable ``momentum`` by
    new_lr / old_lr for the batch in which the rate changes (Goyal et al.); Keras 3 keeps
    momentum as a Python float baked into the compiled step, so there it is skipped with a
    warning.
    """

    _hooks: KerasHooks
    model: Any
    params: Any

    def __init__(self, initial_lr: float, multiplier: float | Callable[[float], float],
                 start_epoch: int = 0, end_epoch: int | None = None, staircase: bool = True,
                 momentum_correction: bool = True, steps_per_epoch: int | None = None,
                 verbose: int = 0) -> None:
        super().__init__()
        if initial_lr is None:
            raise ArgumentError("initial_lr is required (the learning rate the schedule scales)")
        self.initial_lr = float(initial_lr)
        # a constant is an exponential decay, as Horovod's (LearningRateScheduleCallbackImpl)
        self.multiplier = multiplier if callable(multiplier) else (
            lambda epoch: multiplier ** epoch)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = 0
        self._restore_momentum: float | None = None
        self._warned = False

    def _learning_rate(self) -> float:
        return self._hooks.number(self.model.optimizer.learning_rate)

    def _in_range(self, epoch: int) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _momentum_holder(self) -> Any:
        opt = self.model.optimizer
        return getattr(opt, "inner_optimizer", opt)

    def _adjust(self, epoch: float) -> None:
        old_lr = self._learning_rate()
        new_lr = self.initial_lr * float(self.multiplier(epoch))
        self.model.optimizer.learning_rate = new_lr
        if not self.momentum_correction or old_lr <= 0 or new_lr == old_lr:
            return
        momentum: Any = getattr(self._momentum_holder(), "momentum", None)
        if self._hooks.is_variable(momentum):
            self._restore_momentum = self._hooks.number(momentum)
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
            logs["lr"] = self._learning_rate()


class LearningRateWarmupLogic(LearningRateScheduleLogic):
    """Ramp the learning rate from ``initial_lr / size()`` to ``initial_lr`` (Goyal et al.).

    During the first ``warmup_epochs`` epochs, at batch b of epoch e the rate is Horovod's
    ``initial_lr / size * (t * (size - 1) / warmup_epochs + 1)`` with ``t = e + (b + 1) /
    steps_per_epoch``, so the last warmup batch runs at ``initial_lr`` (the already
    size-scaled target rate). With ``verbose`` the last warmup epoch prints ``Epoch N:
    finished gradual learning rate warmup to LR.`` on rank 0.
    """

    def __init__(self, initial_lr: float, warmup_epochs: int = 5,
                 momentum_correction: bool = True, steps_per_epoch: int | None = None,
                 verbose: int = 0) -> None:
        self.warmup_epochs = warmup_epochs

        def multiplier(epoch: float) -> float:
            # Horovod's: one step ahead, so the last warmup batch runs at initial_lr
            epoch += 1.0 / float(self.steps_per_epoch or 1)
            n = size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, verbose=verbose)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1 and self.verbose > 0 and rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{self._learning_rate():g}.", file=sys.stdout, flush=True)


class RankZeroCheckpointLogic:
    """``ModelCheckpoint(save_best_only=True)`` that writes only on rank 0 (mixed into the
    binding's ``ModelCheckpoint``).

    Horovod's argument order (``horovod.tensorflow.keras``): ``monitor``, ``verbose``,
    ``save_weights_only``, ``mode``, ``save_freq``; the path is ``filepath=`` (or the
    ``filepath`` attribute, set before ``fit``). Every rank may keep it in its callback list;
    ranks other than 0 never touch the file. Put ``MetricAverageCallback`` first so the
    monitored value is the all-rank average.

    Example: ``hvd.callbacks.BestModelCheckpoint(monitor="val_loss", filepath="best.keras")``.
    """

    def __init__(self, monitor: str = "val_loss", verbose: int = 0,
                 save_weights_only: bool = False, mode: str = "auto",
                 save_freq: str | int = "epoch", filepath: str | None = None) -> None:
        if not isinstance(save_weights_only, (bool, int, np.bool_)):
            # horovod.keras' order puts mode third: refuse, rather than save weights only
            raise ArgumentError(
                f"BestModelCheckpoint: save_weights_only must be a bool, got "
                f"{save_weights_only!r}; the order is (monitor, verbose, save_weights_only, "
                f"mode, save_freq, filepath): pass mode= by keyword")
        if filepath is None and str(monitor).endswith((".keras", ".h5")):
            raise ArgumentError(
                f"BestModelCheckpoint: monitor={monitor!r} looks like a file path; the first "
                f"argument is the monitored metric, as in Horovod: pass filepath= by keyword")
        # Keras 3 checks the path's suffix when it is made: a stand-in until filepath is set
        stand_in = "unset.weights.h5" if save_weights_only else "unset.keras"
        super().__init__(filepath or stand_in, monitor=monitor,  # type: ignore[call-arg]
                         verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
        self.filepath = filepath

    def on_train_begin(self, logs: Any = None) -> None:
        if self.filepath is None:
            raise ArgumentError("BestModelCheckpoint: no filepath; pass filepath= or set the "
                                "callback's filepath attribute before fit")
        super().on_train_begin(logs)  # type: ignore[misc]

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if rank() == 0:
            super().on_train_batch_end(batch, logs)  # type: ignore[misc]

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if rank() == 0:
            super().on_epoch_end(epoch, logs)  # type: ignore[misc]
