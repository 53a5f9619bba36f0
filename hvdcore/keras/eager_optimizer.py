"""DistributedOptimizer for Keras 3 off TensorFlow (torch, JAX): one class, per-backend collectives.

Wraps the user's optimizer by composition, as hvdcore's TensorFlow-backend class does
(:mod:`hvdcore.tensorflow.keras.optimizer_keras3`): ``apply`` reduces the gradients with the
backend's reducer and hands them to the wrapped optimizer; ``learning_rate``, ``iterations`` and
``variables`` are the wrapped optimizer's (plus the accumulators when ``backward_passes_per_step`` k
> 1). With k > 1 each rank adds its local gradients into accumulators for k steps; on the k-th the
sum (divided by k with ``average_aggregated_gradients``) is reduced and applied once; ``iterations``
counts every step, the ones that only accumulate too, as Horovod's. On torch (eager) this is Python
control flow; on JAX, whose trainer traces ``apply`` under ``jax.jit``,
:func:`hvdcore.keras.jax_ops.apply_accumulated` does it with ``lax.cond`` and ``where``. Variables
registered with ``register_local_var`` keep their local gradient, divided by the set size when
``scale_local_gradients``.

It is registered for Keras serialization as ``hvdcore>DistributedOptimizer``, the name the
TensorFlow-backend class uses, with the same config: a model saved on one backend loads on the
other.
"""

from __future__ import annotations

from typing import Any

import keras

from hvdcore import Average, global_process_set
from hvdcore.arguments import resolve_op
from hvdcore.errors import ArgumentError, UnsupportedError
from hvdcore.keras3_wrapper import WrapsKeras3Optimizer

__all__ = ["EagerDistributedOptimizer", "LocalVariables", "OPTIONS"]

#: DistributedOptimizer options kept in ``get_config()`` (as the TensorFlow-backend class).
OPTIONS = ("sparse_as_dense", "gradient_predivide_factor", "op", "backward_passes_per_step",
           "average_aggregated_gradients", "scale_local_gradients")


class LocalVariables:
    """Variables whose gradients stay local (``register_local_var``); held, not tracked."""

    def __init__(self, variables: Any = ()) -> None:
        self._vars: list[Any] = []  # keeps them alive, so their ids stay unique
        self._ids: set[int] = set()
        for var in variables:
            self.add(var)

    def add(self, var: Any) -> None:
        self._vars.append(var)
        self._ids.add(id(var))

    def __contains__(self, var: Any) -> bool:
        return id(var) in self._ids

    def __len__(self) -> int:
        return len(self._vars)


class _State:
    """Untracked holder (Keras' attribute tracker must not see these)."""

    def __init__(self, reducer: Any, passes: int, average: bool) -> None:
        self.reducer = reducer
        self.passes = passes
        self.average = average
        self.counter: Any = None
        self.accumulators: dict[Any, Any] = {}
        self.local = LocalVariables()
        # JAX: apply runs traced under jit, so accumulation needs lax.cond, not Python ifs
        self.traced = type(reducer).__name__ == "JaxGradientReducer"


@keras.saving.register_keras_serializable(package="hvdcore", name="DistributedOptimizer")
class EagerDistributedOptimizer(WrapsKeras3Optimizer, keras.optimizers.Optimizer):
    """Keras 3 optimizer that reduces gradients over hvdcore ranks, then applies ``optimizer``.

    Create it with :func:`hvdcore.keras.DistributedOptimizer`.
    """

    def __init__(self, optimizer: keras.optimizers.Optimizer, name: str | None = None,
                 compression: Any = None, sparse_as_dense: bool = False,
                 gradient_predivide_factor: float = 1.0, op: Any = Average,
                 backward_passes_per_step: int = 1, average_aggregated_gradients: bool = False,
                 process_set: Any = global_process_set, scale_local_gradients: bool = True,
                 ) -> None:
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise UnsupportedError(f"expected a keras.optimizers.Optimizer, got {type(optimizer)}")
        passes = int(backward_passes_per_step)
        if passes < 1:
            raise ArgumentError(
                f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
        from hvdcore.keras.routing import gradient_reducer

        reducer = gradient_reducer(op, compression, sparse_as_dense, gradient_predivide_factor,
                                   process_set)
        super().__init__(learning_rate=0.0, name=name or f"Distributed{optimizer.name}")
        self.inner_optimizer = optimizer
        self.sparse_as_dense = bool(sparse_as_dense)
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.reduce_op = resolve_op(None, op, "DistributedOptimizer")
        self.backward_passes_per_step = passes
        self.average_aggregated_gradients = bool(average_aggregated_gradients)
        self.scale_local_gradients = bool(scale_local_gradients)
        self._hvd = _State(reducer, passes, self.average_aggregated_gradients)

    def build(self, var_list: list[Any]) -> None:
        """Create the wrapped optimizer's variables (and the accumulators, if any)."""
        if not var_list:
            return  # Keras' .h5 loader builds with no variables: build at the first apply
        if self._hvd.passes > 1 and self._hvd.counter is None:
            self._hvd.counter = self.add_variable(
                shape=(), initializer="zeros", name="hvd_backward_passes",
                dtype="int32" if self._hvd.traced else "int64")  # JAX: int64 needs x64 mode
            self._hvd.accumulators = {
                self._var_key(v): self.add_variable_from_reference(v, name="hvd_accum")
                for v in var_list}
        if not self.inner_optimizer.built:
            self.inner_optimizer.build(var_list)
        super().build(var_list)

    def _reduce(self, grads: list[Any], variables: list[Any]) -> list[Any]:
        local = self._hvd.local
        if not local:
            return self._hvd.reducer.reduce(grads)
        is_local = [v in local for v in variables]
        reduced = self._hvd.reducer.reduce(
            [None if m else g for g, m in zip(grads, is_local, strict=True)])
        kept = [g for g, m in zip(grads, is_local, strict=True) if m]
        if self.scale_local_gradients:
            kept = self._hvd.reducer.divided_by_size(kept)
        local_grads = iter(kept)
        return [next(local_grads) if m else r
                for r, m in zip(reduced, is_local, strict=True)]

    def apply(self, grads: Any, trainable_variables: Any = None) -> None:
        """Reduce ``grads`` over ranks and apply them with the wrapped optimizer."""
        grads, trainable_variables = self._built_for(grads, trainable_variables)
        pairs = [(g, v) for g, v in zip(grads, trainable_variables, strict=False)
                 if g is not None]
        if not pairs:
            return
        gs, vs = [g for g, _ in pairs], [v for _, v in pairs]
        if self._hvd.counter is not None and self._hvd.traced:
            from hvdcore.keras.jax_ops import apply_accumulated

            apply_accumulated(self, gs, vs)
            return
        if self._hvd.counter is not None:
            accs = [self._hvd.accumulators[self._var_key(v)] for v in vs]
            for acc, g in zip(accs, gs, strict=True):
                acc.assign_add(keras.ops.cast(g, acc.dtype))
            self._hvd.counter.assign_add(1)
            if int(keras.ops.convert_to_numpy(self._hvd.counter)) < self._hvd.passes:
                self.inner_optimizer.iterations.assign_add(1)  # a step, as Horovod counts it
                return
            gs = [keras.ops.convert_to_tensor(a) for a in accs]
            if self._hvd.average:
                gs = [g / self._hvd.passes for g in gs]
            gs = self._reduce(gs, vs)
            self.inner_optimizer.apply(gs, vs)
            for acc in accs:
                acc.assign(keras.ops.zeros_like(acc))
            self._hvd.counter.assign(0)
            return
        self.inner_optimizer.apply(self._reduce(gs, vs), vs)

    def get_config(self) -> dict[str, Any]:
        config = {"name": self.name,
                  "optimizer": keras.saving.serialize_keras_object(self.inner_optimizer)}
        for key in OPTIONS:
            config[key] = int(self.reduce_op) if key == "op" else getattr(self, key)
        return config
