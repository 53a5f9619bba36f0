"""``hvd.elastic`` for Keras 3 off TensorFlow (the torch and JAX backends): ``KerasState``,
the callbacks that commit and track progress inside ``model.fit``, and ``run``.

The same names, arguments and semantics as :mod:`hvdcore.tensorflow.keras.elastic` (whose
docstring has the example and the two deliberate differences from Horovod: ``state.batch``
counts the batches of the epoch done, and a partial epoch is resumed by a ``fit`` of its
remaining steps), written with Keras 3 APIs alone: variables are copied with
``keras.ops.convert_to_numpy``, restored with ``assign`` and broadcast by the backend's binding
(:func:`hvdcore.keras.routing.broadcast_variables`). On JAX, Keras keeps the training state off
the model inside ``fit``; the state syncs it back (``jax_state_sync``) before reading the model.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any, TypeVar

import keras
import numpy as np

from hvdcore import errors
from hvdcore.elastic import HorovodInternalError, HostsUpdatedInterrupt, State, run_fn
from hvdcore.elastic import ObjectState as _ObjectState
from hvdcore.elastic.progress_callbacks import (
    CommitStateLogic,
    UpdateBatchStateLogic,
    UpdateEpochStateLogic,
)
from hvdcore.errors import ArgumentError
from hvdcore.keras.portable_callbacks import model_and_optimizer_variables
from hvdcore.keras.routing import broadcast_variables

__all__ = ["run", "State", "ObjectState", "KerasState", "CommitStateCallback",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback", "HorovodInternalError",
           "HostsUpdatedInterrupt"]

F = TypeVar("F", bound=Callable[..., Any])

#: hvdcore's errors that mean a lost peer; raised inside a compiled step (JAX's io_callback)
#: they reach Python wrapped in the framework's runtime error, which names the class
_PEER_LOST = ("RankFailedError", "ShutdownError", "StallError")


def _hvd() -> Any:
    return importlib.import_module("hvdcore.keras")


def _reset() -> None:
    hvd = _hvd()
    hvd.shutdown()
    hvd.init()


def _peer_lost(exc: BaseException) -> errors.HvdcoreError | None:
    if isinstance(exc, errors.HvdcoreError):
        return None  # already hvdcore's: hvdcore.elastic.run judges it
    text = str(exc)
    for name in _PEER_LOST:
        if f"{name}:" in text:
            line = next(ln for ln in text.splitlines() if f"{name}:" in ln)
            return getattr(errors, name)(line.split(f"{name}:")[-1].strip()[:500])
    return None


def run(func: F) -> F:
    """Decorator: run ``func(state, ...)`` elastically (see :mod:`hvdcore.elastic.run`); a
    peer's loss reported from inside a compiled step becomes hvdcore's error again, so that
    the survivors roll back at once."""

    @functools.wraps(func)
    def translated(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            lost = _peer_lost(exc)
            if lost is None:
                raise
            raise lost from exc

    return run_fn(translated, _reset)  # type: ignore[arg-type,return-value]


class ObjectState(_ObjectState):
    """Picklable values kept across resets: ``hvd.elastic.ObjectState(epoch=0, batch=0)``."""

    def __init__(self, **kwargs: Any) -> None:
        from hvdcore import broadcast_object, rank

        super().__init__(broadcast_object, rank, **kwargs)


class KerasState(ObjectState):
    """Horovod's ``KerasState(model, optimizer=None, **kwargs)``: a Keras model, its
    optimizer (``model.optimizer`` by default, built for the model's variables where it is
    not yet, so new workers broadcast the same list) and picklable values (``state.epoch``,
    ``state.batch``) kept across resets. A commit copies the variables to host memory,
    ``restore`` assigns the copies back, ``sync`` broadcasts rank 0's."""

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None,
                 **kwargs: Any) -> None:
        self.model = model
        self.optimizer = optimizer
        self.backend = backend  # Horovod's argument, accepted for compatibility
        self._values = self._copy()
        super().__init__(**kwargs)

    def _variables(self) -> list[Any]:
        sync = getattr(self.model, "jax_state_sync", None)
        if sync is not None:  # JAX: fit's state back on the model
            sync()
        if self.optimizer is None:
            return model_and_optimizer_variables(self.model)
        if not self.optimizer.built and self.model.trainable_variables:
            self.optimizer.build(self.model.trainable_variables)
        return list(self.model.variables) + list(self.optimizer.variables)

    def _copy(self) -> list[np.ndarray]:
        return [np.array(keras.ops.convert_to_numpy(v), copy=True) for v in self._variables()]

    def save(self) -> None:
        """See :meth:`hvdcore.elastic.State.save`."""
        self._values = self._copy()
        super().save()

    def restore(self) -> None:
        """See :meth:`hvdcore.elastic.State.restore`."""
        if getattr(self.model, "_jax_state", None) is not None:
            # JAX: the state of the step that failed must not be synced back over the commit
            self.model._jax_state = None
        variables = self._variables()
        if len(variables) != len(self._values):
            raise ArgumentError(f"KerasState.restore: {len(variables)} variables now, "
                                f"{len(self._values)} at the last commit; the set of variables "
                                f"must not change between commits")
        for var, value in zip(variables, self._values, strict=True):
            var.assign(value)
        super().restore()

    def sync(self) -> None:
        """See :meth:`hvdcore.elastic.State.sync`."""
        broadcast_variables(self._variables(), 0)
        self._values = self._copy()
        super().sync()


class CommitStateCallback(CommitStateLogic, keras.callbacks.Callback):
    __doc__ = CommitStateLogic.__doc__


class UpdateBatchStateCallback(UpdateBatchStateLogic, keras.callbacks.Callback):
    __doc__ = UpdateBatchStateLogic.__doc__


class UpdateEpochStateCallback(UpdateEpochStateLogic, keras.callbacks.Callback):
    __doc__ = UpdateEpochStateLogic.__doc__
