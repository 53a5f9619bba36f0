"""``TensorFlowState`` and ``TensorFlowKerasState``: TF2 variables and Keras models kept across
resets (Horovod's ``horovod.tensorflow.elastic`` states, eager mode).

A commit copies the variables' values to host memory; ``restore`` assigns the copies back;
``sync`` broadcasts rank 0's variables (with hvdcore's check that every rank has the same
variables: a rank whose model differs fails with a ``MismatchError`` naming it) and takes the
result as the new copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from hvdcore.elastic.state import ObjectState
from hvdcore.errors import ArgumentError, UnsupportedError

__all__ = ["TensorFlowState", "TensorFlowKerasState"]


def _copy(variables: Sequence[Any]) -> list[np.ndarray]:
    return [np.array(v.numpy(), copy=True) for v in variables]


def _assign(variables: Sequence[Any], values: list[np.ndarray], what: str) -> None:
    variables = list(variables)
    if len(variables) != len(values):
        raise ArgumentError(f"{what}: {len(variables)} variables now, {len(values)} at the last "
                            f"commit; the set of variables must not change between commits")
    for var, value in zip(variables, values, strict=True):
        var.assign(value)


def _broadcast(variables: Sequence[Any]) -> None:
    from hvdcore.tensorflow.variables import broadcast_variables

    broadcast_variables(list(variables), root_rank=0)


def _base_args() -> tuple[Any, Any]:
    from hvdcore import broadcast_object, rank

    return broadcast_object, rank


class TensorFlowState(ObjectState):
    """Horovod's ``TensorFlowState(variables=None, session=None, **kwargs)`` for TF2 eager.

    ``variables`` (a list of ``tf.Variable`` or Keras variables: a model's and its optimizer's)
    are copied at each commit, restored after a failure and broadcast from rank 0 after a
    reset; keywords are picklable values, as in :class:`~hvdcore.elastic.ObjectState`. Build
    the optimizer first (``opt.build(model.trainable_variables)``) so that its variables exist
    on every rank, new workers included. TF1 sessions are not supported.
    """

    def __init__(self, variables: Sequence[Any] | None = None, session: Any = None,
                 **kwargs: Any) -> None:
        if session is not None or not tf.executing_eagerly():
            raise UnsupportedError("hvd.elastic.TensorFlowState: hvdcore's elastic mode runs "
                                   "TensorFlow 2 eagerly; TF1 sessions and graphs are not "
                                   "supported")
        if variables is None:
            raise ArgumentError("hvd.elastic.TensorFlowState: TensorFlow 2 has no global "
                                "variable collection; pass variables=model.variables + "
                                "optimizer.variables")
        self.variables = list(variables)
        self.session = None
        self._values = _copy(self.variables)
        super().__init__(*_base_args(), **kwargs)

    def save(self) -> None:
        """See :meth:`hvdcore.elastic.State.save`."""
        self._values = _copy(self.variables)
        super().save()

    def restore(self) -> None:
        """See :meth:`hvdcore.elastic.State.restore`."""
        _assign(self.variables, self._values, "TensorFlowState.restore")
        super().restore()

    def sync(self) -> None:
        """See :meth:`hvdcore.elastic.State.sync`."""
        _broadcast(self.variables)
        self._values = _copy(self.variables)
        super().sync()


class TensorFlowKerasState(ObjectState):
    """Horovod's ``TensorFlowKerasState(model, optimizer=None, backend=None, **kwargs)``.

    The model's variables and its optimizer's (``model.optimizer`` by default; plain or
    hvdcore's ``DistributedOptimizer``, Keras 3 or tf-keras) are copied at each commit,
    restored after a failure and broadcast from rank 0 after a reset. The optimizer is built
    for the model's variables where it is not yet (new workers have not trained), so every
    rank broadcasts the same variables. ``backend`` is accepted for Horovod compatibility.
    Keywords are picklable values: ``state.epoch``, ``state.batch``.
    """

    def __init__(self, model: Any, optimizer: Any = None, backend: Any = None,
                 **kwargs: Any) -> None:
        if not tf.executing_eagerly():
            raise UnsupportedError("hvd.elastic.TensorFlowKerasState: hvdcore's elastic mode "
                                   "runs TensorFlow 2 eagerly; TF1 graphs are not supported")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer",
                                                                         None)
        self.backend = backend
        self._values = _copy(self._variables())
        super().__init__(*_base_args(), **kwargs)

    def _variables(self) -> list[Any]:
        from hvdcore.tensorflow.keras.callbacks import _optimizer_variables

        return list(self.model.variables) + _optimizer_variables(self.optimizer, self.model)

    def save(self) -> None:
        """See :meth:`hvdcore.elastic.State.save`."""
        self._values = _copy(self._variables())
        super().save()

    def restore(self) -> None:
        """See :meth:`hvdcore.elastic.State.restore`."""
        _assign(self._variables(), self._values, "TensorFlowKerasState.restore")
        super().restore()

    def sync(self) -> None:
        """See :meth:`hvdcore.elastic.State.sync`."""
        variables = self._variables()
        _broadcast(variables)
        self._values = _copy(variables)
        super().sync()
