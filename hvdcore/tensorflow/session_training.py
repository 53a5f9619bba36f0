"""TF1-style training in a Session: Horovod's ``DistributedOptimizer`` for a
``tf.compat.v1.train.Optimizer`` and ``BroadcastGlobalVariablesHook``.

Scripts written for TensorFlow 1 (a graph, ``MonitoredTrainingSession``, ``opt.minimize``) run
on ``tf.compat.v1`` in TensorFlow 2. As in Horovod (``horovod/tensorflow/__init__.py``):

- the optimizer's ``compute_gradients`` returns the wrapped optimizer's gradients reduced over
  the ranks (Average by default; one grouped allreduce, ``tf.IndexedSlices`` allgathered),
  ``apply_gradients`` and the slots are the wrapped optimizer's, so ``minimize`` trains on the
  job's gradients;
- the hook broadcasts every global variable from ``root_rank`` once the Session exists, so all
  ranks start from the root's initial values.

Not here, each refused with a ``ValueError`` when the optimizer is made: ``op=Adasum`` (Horovod
then builds its Adasum delta optimizer) and ``backward_passes_per_step`` above 1 (Horovod's
graph-side gradient accumulation); use a Keras optimizer or ``DistributedGradientTape`` for them.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from hvdcore import Adasum, Average, global_process_set
from hvdcore.arguments import gradient_groups
from hvdcore.errors import ArgumentError
from hvdcore.tensorflow.compression import Compression, Compressor
from hvdcore.tensorflow.gradients import GradientReducer
from hvdcore.tensorflow.variables import broadcast_global_variables

__all__ = ["is_v1_optimizer", "V1DistributedOptimizer", "BroadcastGlobalVariablesHook"]


def is_v1_optimizer(optimizer: Any) -> bool:
    """True for a ``tf.compat.v1.train.Optimizer`` (GradientDescentOptimizer, AdamOptimizer,
    MomentumOptimizer, ...)."""
    return isinstance(optimizer, tf.compat.v1.train.Optimizer)


class V1DistributedOptimizer(tf.compat.v1.train.Optimizer):
    """A ``tf.compat.v1.train.Optimizer`` whose gradients are reduced over the ranks (made by
    :func:`hvdcore.tensorflow.DistributedOptimizer`; see the module docstring)."""

    def __init__(self, optimizer: Any, name: str | None = None, use_locking: bool = False,
                 compression: type[Compressor] = Compression.none,
                 sparse_as_dense: bool = False, backward_passes_per_step: int = 1,
                 op: Any = Average, gradient_predivide_factor: float = 1.0,
                 num_groups: int = 0, groups: Any = None,
                 process_set: Any = global_process_set) -> None:
        if op == Adasum:  # (an IntEnum: hvd.Adasum and its value 2 alike)
            raise ArgumentError(
                "DistributedOptimizer(op=Adasum) with a tf.compat.v1.train optimizer: Horovod "
                "builds its Adasum delta optimizer there, which hvdcore does not have; use "
                "Average or Sum, or a Keras optimizer / DistributedGradientTape")
        if int(backward_passes_per_step) != 1:
            raise ArgumentError(
                f"DistributedOptimizer(backward_passes_per_step={backward_passes_per_step}) "
                "with a tf.compat.v1.train optimizer: hvdcore does not accumulate gradients in "
                "a TF1 graph; accumulate them yourself, or use a Keras optimizer, whose "
                "DistributedOptimizer takes backward_passes_per_step")
        gradient_groups(groups, num_groups, "DistributedOptimizer")
        self._optimizer = optimizer
        self._reducer = GradientReducer(op, compression, sparse_as_dense,
                                        gradient_predivide_factor, process_set)
        super().__init__(use_locking=use_locking,
                         name=name or f"Distributed{type(optimizer).__name__}")

    def compute_gradients(self, *args: Any, **kwargs: Any) -> list[tuple[Any, Any]]:
        """The wrapped optimizer's ``(gradient, variable)`` pairs, gradients reduced over the
        ranks (None stays None)."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads = self._reducer.reduce([g for g, _ in pairs])
        return list(zip(grads, [v for _, v in pairs], strict=True))

    def apply_gradients(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped optimizer's ``apply_gradients``."""
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped optimizer's ``get_slot``."""
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped optimizer's ``get_slot_names``."""
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped optimizer's ``variables``."""
        return self._optimizer.variables(*args, **kwargs)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """A ``SessionRunHook`` that broadcasts every global variable from ``root_rank`` when the
    Session is created (after their initializers ran), as Horovod's: pass it to
    ``MonitoredTrainingSession(hooks=[...])``. ``device`` places the broadcast op."""

    def __init__(self, root_rank: int, device: str = "") -> None:
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.bcast_op: Any = None

    def begin(self) -> None:
        """Build the broadcast op in the graph being finalized (again for a new graph)."""
        if self.bcast_op is None or self.bcast_op.graph is not tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Run the broadcast once the Session exists."""
        session.run(self.bcast_op)
