"""TF1 training with Adasum: the delta optimizer that ``DistributedOptimizer(op=Adasum)`` of a
``tf.compat.v1.train`` optimizer returns.

Adasum combines what each rank's optimizer did rather than its gradients. Every rank applies
its own gradients with the wrapped optimizer; on every ``backward_passes_per_step``-th run the
change since the last combination (a variable minus its *start*) is reduced with Adasum over
the ranks, the start moves by the combined change, and every variable is set to the new start.
Between combinations the ranks' variables drift apart; after one they are equal again.

This is the design Horovod documents and carries as ``_DistributedAdasumOptimizer``; in Horovod
0.28.1 that class's ``apply_gradients`` hands straight to the wrapped optimizer, so its hooks
never run and the ranks never communicate. hvdcore runs the design. The starts are the slots
``delta_start`` and the run counter is ``step_count``: global variables, so
``BroadcastGlobalVariablesHook`` and checkpoints carry them. Adasum's limits (the global process
set, a power-of-two number of ranks: ``UnimplementedError``) are checked when the optimizer is
made.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from hvdcore import Adasum, global_process_set
from hvdcore.arguments import check_adasum_ranks, check_passes
from hvdcore.errors import ArgumentError
from hvdcore.tensorflow.compression import Compression, Compressor
from hvdcore.tensorflow.reduce_ops import grouped_allreduce

__all__ = ["V1AdasumOptimizer"]

v1 = tf.compat.v1


class V1AdasumOptimizer(tf.compat.v1.train.Optimizer):
    """A ``tf.compat.v1.train.Optimizer`` that trains locally and combines the ranks' changes
    with Adasum every ``backward_passes_per_step`` runs (see the module docstring)."""

    def __init__(self, optimizer: Any, name: str | None = None, use_locking: bool = False,
                 compression: type[Compressor] = Compression.none,
                 backward_passes_per_step: int = 1,
                 process_set: Any = global_process_set) -> None:
        self._passes = check_passes(backward_passes_per_step)
        if tf.executing_eagerly():
            raise ArgumentError(
                "DistributedOptimizer(op=Adasum) of a tf.compat.v1.train optimizer builds graph "
                "ops: make it inside a graph (tf.Graph().as_default()), or use a Keras "
                "optimizer or DistributedGradientTape")
        check_adasum_ranks(process_set.process_set_id, process_set.size(),
                           "DistributedOptimizer(op=Adasum)", None)
        self._optimizer = optimizer
        self._compression = compression
        self._process_set = process_set
        super().__init__(use_locking=use_locking,
                         name=name or f"DistributedDelta{type(optimizer).__name__}")

    def compute_gradients(self, *args: Any, **kwargs: Any) -> list[tuple[Any, Any]]:
        """The wrapped optimizer's gradients, not reduced (the changes are combined later)."""
        return self._optimizer.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars: Any, global_step: Any = None,
                        name: str | None = None) -> Any:
        """The training op: the wrapped optimizer's update, then, on every
        ``backward_passes_per_step``-th run, the Adasum combination of the ranks' changes."""
        pairs = list(grads_and_vars)
        variables = [v for g, v in pairs if g is not None]
        with tf.init_scope():
            with v1.variable_scope(self.get_name(), reuse=v1.AUTO_REUSE):
                count = v1.get_variable("step_count", shape=(), dtype=tf.int64,
                                        trainable=False, initializer=v1.zeros_initializer())
            starts = [self._zeros_slot(v, "delta_start", self.get_name()) for v in variables]
        first = tf.equal(count, 0)
        began = tf.cond(first, lambda: tf.group(*(s.assign(v) for s, v in zip(
            starts, variables, strict=True))), tf.no_op)
        with tf.control_dependencies([began]):
            local = self._optimizer.apply_gradients(pairs, global_step=global_step, name=name)

        def combine() -> Any:
            sent, contexts = [], []
            for s, v in zip(starts, variables, strict=True):
                delta, ctx = self._compression.compress(v.read_value() - s.read_value())
                sent.append(delta)
                contexts.append(ctx)
            combined = grouped_allreduce(sent, op=Adasum, process_set=self._process_set,
                                         name=f"{self.get_name()}.deltas")
            moves = []
            for s, v, c, ctx in zip(starts, variables, combined, contexts, strict=True):
                change = self._compression.decompress(c, ctx)
                moves.append(v.assign(s.assign_add(tf.cast(change, s.dtype))))
            return tf.group(*moves)

        with tf.control_dependencies([local]):
            now = tf.equal(count % self._passes, self._passes - 1)
            combined = tf.cond(now, combine, tf.no_op)
        with tf.control_dependencies([combined]):
            return tf.group(count.assign_add(1))

    def get_slot(self, var: Any, name: str) -> Any:
        """``delta_start`` of ``var``, else the wrapped optimizer's slot ``name``."""
        own = super().get_slot(var, name)
        return own if own is not None else self._optimizer.get_slot(var, name)

    def get_slot_names(self) -> list[str]:
        """``delta_start`` and the wrapped optimizer's slot names."""
        return super().get_slot_names() + self._optimizer.get_slot_names()

    def variables(self) -> Any:
        """The wrapped optimizer's variables."""
        return self._optimizer.variables()
