"""``TensorFlowState`` and ``TensorFlowKerasState``: TF2 variables and Keras models kept across
resets (Horovod's ``horovod.tensorflow.elastic`` states; ``TensorFlowState`` also in a TF1-style
graph run by a ``tf.compat.v1.Session``).

A commit copies the variables' values to host memory; ``restore`` assigns the copies back;
``sync`` broadcasts rank 0's variables (with hvdcore's check that every rank has the same
variables: a rank whose model differs fails with a ``MismatchError`` naming it) and takes the
result as the new copy. In a Session graph the assignments and the broadcast are ops built
once, when the state is made, and run in the session (as Horovod's are).
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


class _SessionVariables:
    """Copy, assign and broadcast ``variables`` of a TF1-style graph through ``session``."""

    def __init__(self, variables: Sequence[Any] | None, session: Any) -> None:
        from hvdcore.tensorflow.variables import broadcast_variables

        with session.graph.as_default():
            self.variables = list(tf.compat.v1.global_variables() if variables is None
                                  else variables)
            self.session = session
            self.feeds = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape)
                          for v in self.variables]
            self.assign_op = tf.group(*[v.assign(p) for v, p in
                                        zip(self.variables, self.feeds, strict=True)])
            self.broadcast_op = broadcast_variables(self.variables, root_rank=0)

    def copy(self) -> list[np.ndarray]:
        return [np.array(v, copy=True) for v in self.session.run(self.variables)]

    def assign(self, values: list[np.ndarray]) -> None:
        self.session.run(self.assign_op, feed_dict=dict(zip(self.feeds, values, strict=True)))

    def broadcast(self) -> None:
        self.session.run(self.broadcast_op)


class TensorFlowState(ObjectState):
    """Horovod's ``TensorFlowState(variables=None, session=None, **kwargs)``.

    ``variables`` (a list of ``tf.Variable`` or Keras variables: a model's and its optimizer's)
    are copied at each commit, restored after a failure and broadcast from rank 0 after a
    reset; keywords are picklable values, as in :class:`~hvdcore.elastic.ObjectState`. Build
    the optimizer first (``opt.build(model.trainable_variables)``) so that its variables exist
    on every rank, new workers included.

    TF1-style graphs: pass the ``tf.compat.v1.Session`` that runs the graph as ``session``
    (``variables`` default to the graph's global variables, as in Horovod); make the state
    after the variables are initialised, and before ``graph.finalize()`` (it builds its
    assignment and broadcast ops in the session's graph).
    """

    def __init__(self, variables: Sequence[Any] | None = None, session: Any = None,
                 **kwargs: Any) -> None:
        self._graph: _SessionVariables | None = None
        if session is not None:
            self._graph = _SessionVariables(variables, session)
            variables = self._graph.variables
        elif not tf.executing_eagerly():
            raise ArgumentError("hvd.elastic.TensorFlowState in a TF1-style graph: pass the "
                                "tf.compat.v1.Session that runs it as session=")
        elif variables is None:
            raise ArgumentError("hvd.elastic.TensorFlowState: TensorFlow 2 has no global "
                                "variable collection; pass variables=model.variables + "
                                "optimizer.variables")
        self.variables = list(variables)
        self.session = session
        self._values = self._copy()
        super().__init__(*_base_args(), **kwargs)

    def _copy(self) -> list[np.ndarray]:
        return self._graph.copy() if self._graph else _copy(self.variables)

    def save(self) -> None:
        """See :meth:`hvdcore.elastic.State.save`."""
        self._values = self._copy()
        super().save()

    def restore(self) -> None:
        """See :meth:`hvdcore.elastic.State.restore`."""
        if self._graph:
            self._graph.assign(self._values)
        else:
            _assign(self.variables, self._values, "TensorFlowState.restore")
        super().restore()

    def sync(self) -> None:
        """See :meth:`hvdcore.elastic.State.sync`."""
        if self._graph:
            self._graph.broadcast()
        else:
            _broadcast(self.variables)
        self._values = self._copy()
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
