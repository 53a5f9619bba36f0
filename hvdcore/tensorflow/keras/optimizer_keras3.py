"""DistributedOptimizer for Keras 3 (``keras.optimizers.Optimizer``, TensorFlow backend).

A documented subclass that wraps the user's optimizer by composition, in the way Keras' own
``LossScaleOptimizer`` does: ``apply``/``apply_gradients`` reduce the gradients over ranks and
hand them to the wrapped optimizer; ``learning_rate``, ``iterations`` and ``variables`` are the
wrapped optimizer's (plus this wrapper's accumulators when ``backward_passes_per_step > 1``).
It works in compiled ``model.fit`` (the collectives are ``tf.numpy_function`` ops; use
``jit_compile=False`` on GPU machines, XLA cannot call into MPI).
"""

from __future__ import annotations

from typing import Any

import keras

from hvdcore import Average, global_process_set
from hvdcore.errors import UnsupportedError
from hvdcore.keras3_wrapper import WrapsKeras3Optimizer
from hvdcore.tensorflow.compression import Compression, Compressor
from hvdcore.tensorflow.gradients import GradientReducer
from hvdcore.tensorflow.keras.aggregation import (
    Accumulation,
    LocalVariables,
    check_passes,
    distributed_apply,
    options_config,
    set_options,
)

__all__ = ["Keras3DistributedOptimizer"]


class _State:
    """Untracked holder (Keras' attribute tracker must not see these twice)."""

    def __init__(self, reducer: GradientReducer, passes: int, average: bool) -> None:
        self.reducer = reducer
        self.passes = passes
        self.average = average
        self.accumulation: Accumulation | None = None
        self.local = LocalVariables()


@keras.saving.register_keras_serializable(package="hvdcore", name="DistributedOptimizer")
class Keras3DistributedOptimizer(WrapsKeras3Optimizer, keras.optimizers.Optimizer):
    """Keras 3 optimizer that averages gradients over hvdcore ranks, then applies ``optimizer``.

    Create it with :func:`hvdcore.tensorflow.keras.DistributedOptimizer`.
    """

    def __init__(self, optimizer: keras.optimizers.Optimizer, name: str | None = None,
                 compression: type[Compressor] = Compression.none,
                 sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                 op: Any = Average, backward_passes_per_step: int = 1,
                 average_aggregated_gradients: bool = False,
                 process_set: Any = global_process_set,
                 scale_local_gradients: bool = True) -> None:
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise UnsupportedError(f"expected a keras.optimizers.Optimizer, got {type(optimizer)}")
        check_passes(backward_passes_per_step)
        super().__init__(learning_rate=0.0, name=name or f"Distributed{optimizer.name}")
        self.inner_optimizer = optimizer
        set_options(self, sparse_as_dense, gradient_predivide_factor, op,
                    backward_passes_per_step, average_aggregated_gradients,
                    scale_local_gradients)
        self._hvd = _State(
            GradientReducer(op, compression, sparse_as_dense, gradient_predivide_factor,
                            process_set),
            self.backward_passes_per_step, self.average_aggregated_gradients)

    def build(self, var_list: list[Any]) -> None:
        """Create the wrapped optimizer's variables (and the accumulators, if any)."""
        if not var_list:
            # Keras 3's .h5 loader builds with the model's own (empty) variable list; building
            # now would reject the real variables at the first apply: build then instead
            return
        if self._hvd.passes > 1 and self._hvd.accumulation is None:
            counter = self.add_variable(shape=(), initializer="zeros", dtype="int64",
                                        name="hvd_backward_passes")
            accs = {self._var_key(v): self.add_variable_from_reference(v, name="hvd_accum")
                    for v in var_list}
            self._hvd.accumulation = Accumulation(counter, accs, self._hvd.passes,
                                                  self._hvd.average)
        if not self.inner_optimizer.built:
            self.inner_optimizer.build(var_list)
        super().build(var_list)

    def apply(self, grads: Any, trainable_variables: Any = None) -> None:
        """Reduce ``grads`` over ranks and apply them with the wrapped optimizer."""
        grads, trainable_variables = self._built_for(grads, trainable_variables)

        def apply_fn(gs: list[Any], vs: list[Any]) -> None:
            self.inner_optimizer.apply(gs, vs)

        distributed_apply(self._hvd.reducer, grads, trainable_variables, apply_fn,
                          self._hvd.accumulation, self._var_key, self._hvd.local,
                          self.scale_local_gradients, self.inner_optimizer.iterations)

    def get_config(self) -> dict[str, Any]:
        return options_config(self, keras.saving.serialize_keras_object(self.inner_optimizer))
