"""TF1-style training in a Session: Horovod's ``DistributedOptimizer`` for a
``tf.compat.v1.train.Optimizer`` and ``BroadcastGlobalVariablesHook``.

Scripts written for TensorFlow 1 (a graph, ``MonitoredTrainingSession``, ``opt.minimize``) run
on ``tf.compat.v1`` in TensorFlow 2. As in Horovod (``horovod/tensorflow/__init__.py``):

- the optimizer's ``compute_gradients`` returns the wrapped optimizer's gradients reduced over
  the ranks (Average by default; one grouped allreduce, ``tf.IndexedSlices`` allgathered),
  ``apply_gradients`` and the slots are the wrapped optimizer's, so ``minimize`` trains on the
  job's gradients;
- ``backward_passes_per_step`` N > 1 accumulates N passes in the graph before one reduction
  and one update (:mod:`hvdcore.tensorflow.graph_accumulation`);
- ``register_local_var(var)`` keeps ``var``'s gradient local (not reduced; divided by the
  process set's size when ``scale_local_gradients``, Horovod's default);
- the hook broadcasts every global variable from ``root_rank`` once the Session exists, so all
  ranks start from the root's initial values.

``op=Adasum`` is another optimizer (:mod:`hvdcore.tensorflow.delta_adasum`), which
:func:`hvdcore.tensorflow.DistributedOptimizer` returns instead of this one.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from hvdcore import Adasum, Average, global_process_set
from hvdcore.arguments import check_passes, gradient_groups
from hvdcore.errors import ArgumentError
from hvdcore.tensorflow.compression import Compression, Compressor
from hvdcore.tensorflow.gradients import GradientReducer, LocalVariables, reduce_with_local
from hvdcore.tensorflow.graph_accumulation import GraphAccumulator
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
                 average_aggregated_gradients: bool = False, num_groups: int = 0,
                 groups: Any = None, process_set: Any = global_process_set,
                 scale_local_gradients: bool = True) -> None:
        if op == Adasum:  # (an IntEnum: hvd.Adasum and its value 2 alike)
            raise ArgumentError(
                "V1DistributedOptimizer reduces gradients with Average or Sum; for Adasum "
                "call hvdcore.tensorflow.DistributedOptimizer(op=Adasum), which returns the "
                "Adasum delta optimizer (V1AdasumOptimizer)")
        gradient_groups(groups, num_groups, "DistributedOptimizer")
        self._optimizer = optimizer
        self._reducer = GradientReducer(op, compression, sparse_as_dense,
                                        gradient_predivide_factor, process_set)
        self._local = LocalVariables()
        self.scale_local_gradients = bool(scale_local_gradients)
        self._accumulator = (
            GraphAccumulator(backward_passes_per_step, average_aggregated_gradients,
                             sparse_as_dense)
            if check_passes(backward_passes_per_step) > 1 else None)
        super().__init__(use_locking=use_locking,
                         name=name or f"Distributed{type(optimizer).__name__}")

    def register_local_var(self, var: Any) -> None:
        """Keep ``var``'s gradient local: not reduced over the ranks, and divided by the
        process set's size when ``scale_local_gradients``."""
        if not hasattr(var, "dtype") or not hasattr(var, "shape"):
            raise ArgumentError(f"register_local_var takes a variable, got "
                                f"{type(var).__name__}")
        self._local.add(var)

    def compute_gradients(self, *args: Any, **kwargs: Any) -> list[tuple[Any, Any]]:
        """The wrapped optimizer's ``(gradient, variable)`` pairs, gradients reduced over the
        ranks (None stays None; with ``backward_passes_per_step`` N, summed over N passes
        first: see the module docstring)."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        variables = [v for _, v in pairs]

        def reduce(grads: list[Any]) -> list[Any]:
            return reduce_with_local(self._reducer, grads, variables, self._local,
                                     self.scale_local_gradients)

        grads = [g for g, _ in pairs]
        if self._accumulator is not None:
            reduced = self._accumulator.gradients(grads, reduce)
        else:
            reduced = reduce(grads)
        return list(zip(reduced, variables, strict=True))

    def apply_gradients(self, grads_and_vars: Any, global_step: Any = None,
                        name: str | None = None) -> Any:
        """The wrapped optimizer's ``apply_gradients`` (with ``backward_passes_per_step`` N:
        on every N-th pass only; ``global_step`` still counts every pass)."""
        if self._accumulator is None:
            return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                   name=name)
        pairs = list(grads_and_vars)
        return self._accumulator.apply(
            pairs, lambda: self._optimizer.apply_gradients(pairs, global_step=global_step,
                                                           name=name),
            global_step)

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
