"""Gradient accumulation in a TF1 graph: ``backward_passes_per_step`` for a
``tf.compat.v1.train`` optimizer (Horovod's ``LocalGradientAggregationHelper``, graph mode).

Each ``session.run`` of the training op is one backward pass. Its gradients are added to
local variables (one per gradient that is not None, plus a pass counter, all in
``LOCAL_VARIABLES``: ``MonitoredTrainingSession`` initializes them, a plain ``Session`` needs
``tf.compat.v1.local_variables_initializer()``). On the N-th pass the sums are reduced over
the ranks (one grouped call), divided by N when ``average_aggregated_gradients``, and the
wrapped optimizer applies them; on the other passes nothing is applied and the
``global_step`` given to ``apply_gradients`` still advances by one, so it counts passes as
in Horovod. The counter advances identically on every rank (every rank runs the same
training op), so every rank reduces on the same pass.

``tf.IndexedSlices`` gradients cannot be summed in a variable: they need
``sparse_as_dense=True`` (Horovod's rule; a ``ValueError`` otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from hvdcore.arguments import check_passes
from hvdcore.errors import ArgumentError

__all__ = ["GraphAccumulator"]

v1 = tf.compat.v1


class GraphAccumulator:
    """Accumulates a graph's gradients over ``passes`` backward passes (see the module
    docstring). ``average``: divide the reduced sums by ``passes``; ``sparse_as_dense``:
    accumulate ``tf.IndexedSlices`` as dense tensors (else they are refused)."""

    def __init__(self, passes: int, average: bool, sparse_as_dense: bool) -> None:
        passes = check_passes(passes)
        if tf.executing_eagerly():
            raise ArgumentError(
                f"backward_passes_per_step={passes} with a tf.compat.v1.train optimizer "
                "accumulates in a graph: build the optimizer inside one (tf.Graph()."
                "as_default(), or tf.compat.v1.disable_eager_execution()), or use a Keras "
                "optimizer, whose DistributedOptimizer accumulates eagerly too")
        self.passes = passes
        self.average = bool(average)
        self.sparse_as_dense = bool(sparse_as_dense)
        self.counter: Any = None  # the last compute_gradients' pass counter

    def _dense(self, grad: Any) -> Any:
        if isinstance(grad, tf.IndexedSlices):
            if not self.sparse_as_dense:
                raise ArgumentError(
                    f"backward_passes_per_step={self.passes} accumulates gradients in "
                    "variables, which cannot hold tf.IndexedSlices (an embedding's gradient): "
                    "pass sparse_as_dense=True")
            return tf.convert_to_tensor(grad)
        return grad

    def gradients(self, grads: list[Any], reduce: Callable[[list[Any]], list[Any]]
                  ) -> list[Any]:
        """Graph tensors for one backward pass of ``grads`` (None stays None): on the N-th
        pass ``reduce`` of the sums (given and returned in the order of ``grads``, None where
        a gradient is None; divided by N when averaging), else this pass's own."""
        dense = {i: self._dense(g) for i, g in enumerate(grads) if g is not None}
        present = list(dense)
        if not present:
            return list(grads)
        with v1.variable_scope(None, default_name="hvdcore_accumulation"):
            counter = v1.get_variable("passes", shape=(), dtype=tf.int32, trainable=False,
                                      initializer=v1.zeros_initializer(),
                                      collections=[v1.GraphKeys.LOCAL_VARIABLES])
            sums = [v1.get_variable(f"sum_{i}", shape=dense[i].shape, dtype=dense[i].dtype,
                                    trainable=False, initializer=v1.zeros_initializer(),
                                    collections=[v1.GraphKeys.LOCAL_VARIABLES])
                    for i in present]
        self.counter = counter
        # a window starts from zero sums; then this pass is added, then counted
        cleared = tf.cond(tf.equal(counter, 0),
                          lambda: tf.group(*(s.assign(tf.zeros_like(s)) for s in sums)),
                          tf.no_op)
        with tf.control_dependencies([cleared]):
            added = tf.group(*(s.assign_add(dense[i]) for s, i in zip(sums, present,
                                                                       strict=True)))
        with tf.control_dependencies([added]):
            counted = counter.assign_add(1)

        def reduce_sums() -> list[Any]:
            aligned: list[Any] = [None] * len(grads)
            for s, i in zip(sums, present, strict=True):
                aligned[i] = s.read_value()
            reduced = reduce(aligned)
            totals = [reduced[i] for i in present]
            with tf.control_dependencies([t for t in totals if t is not None]):
                reset = counter.assign(0)
            with tf.control_dependencies([reset]):
                divisor = float(self.passes) if self.average else 1.0
                return [tf.identity(t) if divisor == 1.0 else t / tf.cast(divisor, t.dtype)
                        for t in totals]

        def own() -> list[Any]:
            return [tf.identity(dense[i]) for i in present]

        with tf.control_dependencies([counted]):
            out = tf.cond(tf.equal(counted, self.passes), reduce_sums, own)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        result: list[Any] = [None] * len(grads)
        for i, t in zip(present, out, strict=True):
            result[i] = t
        return result

    def apply(self, grads_and_vars: list[tuple[Any, Any]], apply: Callable[[], Any],
              global_step: Any = None) -> Any:
        """The training op: ``apply()`` (the wrapped optimizer's ``apply_gradients``) on the
        pass that reduced, else ``global_step`` (when given) advanced by one."""
        if self.counter is None:
            raise ArgumentError("apply_gradients with backward_passes_per_step > 1 needs the "
                                "gradients of this optimizer's compute_gradients (or use "
                                "minimize)")
        counter = self.counter
        ready = [g for g, _ in grads_and_vars if g is not None]
        with tf.control_dependencies(ready):
            reduced_now = tf.equal(counter.read_value(), 0)
            applied = tf.cond(reduced_now, lambda: tf.group(apply()), tf.no_op)
        with tf.control_dependencies([applied]):
            if global_step is None:
                return tf.group(applied)
            return tf.cond(reduced_now, tf.no_op,
                           lambda: tf.group(global_step.assign_add(
                               tf.constant(1, dtype=global_step.dtype.base_dtype))))
