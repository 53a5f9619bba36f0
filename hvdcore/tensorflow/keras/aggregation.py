"""The distributed apply step shared by the Keras 3 and tf-keras DistributedOptimizer classes.

With ``backward_passes_per_step`` k > 1 each rank adds its gradients into local accumulators for
k steps; on the k-th step the accumulated gradients (divided by k when
``average_aggregated_gradients``) are reduced over ranks and applied once by the wrapped
optimizer, and the accumulators are reset. On the other steps the wrapped optimizer is not
called, but its ``iterations`` still counts the step, as Horovod's
(``LocalGradientAggregationHelperEager.apply_gradients``: ``non_aggregation_step``), so a
learning-rate schedule moves per batch. Works eagerly and inside ``tf.function`` (``tf.cond``
on a step counter that is identical on every rank).

Variables registered with ``register_local_var`` (Horovod's model-parallel escape hatch) keep
their local gradient: it is not reduced, and is divided by the set size when
``scale_local_gradients`` (Horovod's default), like horovod/_keras ``_allreduce``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from hvdcore.arguments import check_passes, resolve_op
from hvdcore.tensorflow.gradients import GradientReducer, LocalVariables, reduce_with_local

__all__ = ["Accumulation", "LocalVariables", "distributed_apply", "check_passes", "set_options",
           "options_config"]

_OPTIONS = ("sparse_as_dense", "gradient_predivide_factor", "op", "backward_passes_per_step",
            "average_aggregated_gradients", "scale_local_gradients")


def set_options(opt: Any, sparse_as_dense: bool, gradient_predivide_factor: float, op: Any,
                backward_passes_per_step: int, average_aggregated_gradients: bool,
                scale_local_gradients: bool = True) -> None:
    """Store Horovod's DistributedOptimizer options on ``opt`` (both Keras flavours)."""
    opt.sparse_as_dense = bool(sparse_as_dense)
    opt.gradient_predivide_factor = float(gradient_predivide_factor)
    opt.reduce_op = resolve_op(None, op, "DistributedOptimizer")
    opt.backward_passes_per_step = check_passes(backward_passes_per_step)
    opt.average_aggregated_gradients = bool(average_aggregated_gradients)
    opt.scale_local_gradients = bool(scale_local_gradients)


def options_config(opt: Any, serialized_optimizer: Any) -> dict[str, Any]:
    """``get_config()`` of a DistributedOptimizer: its name, wrapped optimizer and options."""
    config = {"name": opt.name, "optimizer": serialized_optimizer}
    for key in _OPTIONS:
        value = opt.reduce_op if key == "op" else getattr(opt, key)
        config[key] = int(value) if key == "op" else value
    return config


class Accumulation:
    """Local accumulators (one per trainable variable, keyed by the optimizer's var key)."""

    def __init__(self, counter: Any, accumulators: dict[Any, Any], passes: int,
                 average: bool) -> None:
        self.counter = counter
        self.accumulators = accumulators
        self.passes = passes
        self.average = average


def _read(v: Any) -> tf.Tensor:
    inner = getattr(v, "value", None)
    if isinstance(inner, tf.Variable):
        return inner.read_value()
    return tf.convert_to_tensor(v)


def distributed_apply(reducer: GradientReducer, grads: Sequence[Any], variables: Sequence[Any],
                      apply_fn: Callable[[list[Any], list[Any]], Any],
                      accumulation: Accumulation | None, var_key: Callable[[Any], Any],
                      local: LocalVariables | None = None, scale_local: bool = True,
                      iterations: Any = None) -> None:
    """Reduce ``grads`` over ranks (after local accumulation) and call ``apply_fn``;
    ``iterations``: the wrapped optimizer's step counter, counted on the steps that only
    accumulate."""
    pairs = [(g, v) for g, v in zip(grads, variables, strict=False) if g is not None]
    if not pairs:
        return
    if accumulation is None:
        reduced = reduce_with_local(reducer, [g for g, _ in pairs], [v for _, v in pairs], local,
                          scale_local)
        apply_fn(reduced, [v for _, v in pairs])
        return

    accs = [accumulation.accumulators[var_key(v)] for _, v in pairs]
    for acc, (g, _) in zip(accs, pairs, strict=False):
        acc.assign_add(tf.cast(tf.convert_to_tensor(g), acc.dtype))
    accumulation.counter.assign_add(1)
    passes = accumulation.passes

    def apply_now() -> tf.Tensor:
        summed = [_read(a) for a in accs]
        if accumulation.average:
            summed = [s / tf.cast(passes, s.dtype) for s in summed]
        reduced = reduce_with_local(reducer, summed, [v for _, v in pairs], local, scale_local)
        with tf.control_dependencies([r for r in reduced if r is not None]):
            apply_fn(reduced, [v for _, v in pairs])
        with tf.control_dependencies([r for r in reduced if r is not None]):
            for acc in accs:
                acc.assign(tf.zeros_like(_read(acc)))
            accumulation.counter.assign(0)
        return tf.constant(True)

    def accumulate_only() -> tf.Tensor:
        if iterations is not None:
            iterations.assign_add(tf.cast(1, iterations.dtype))
        return tf.constant(False)

    tf.cond(tf.greater_equal(_read(accumulation.counter), passes), apply_now, accumulate_only)
