"""DistributedOptimizer for Keras 2: tf-keras (``TF_USE_LEGACY_KERAS=1``), or the ``keras``
that TensorFlow 2.13-2.15 bundle (the same optimizer API; :func:`~hvdcore.tensorflow.keras.
flavours.keras2_package` picks the one this TensorFlow has, ``K2`` below).

A documented subclass of ``K2.optimizers.Optimizer`` that wraps the user's optimizer by
composition (as tf-keras' own ``LossScaleOptimizer`` does): ``apply_gradients`` reduces the
gradients over ranks and calls the wrapped optimizer's ``apply_gradients``; ``learning_rate``,
``iterations`` and ``variables`` are the wrapped optimizer's. Legacy ``OptimizerV2`` optimizers
(``K2.optimizers.legacy.*``) are wrapped the same way.
"""

from __future__ import annotations

import copy
import importlib
from typing import Any

import tensorflow as tf

from hvdcore import Average, global_process_set
from hvdcore.errors import UnsupportedError
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
from hvdcore.tensorflow.keras.flavours import keras2_package

__all__ = ["TfKerasDistributedOptimizer", "TF_KERAS_OPTIMIZER_TYPES"]

K2: Any = keras2_package()
_CallableList = importlib.import_module(f"{K2.__name__}.src.optimizers.optimizer").CallableList
TF_KERAS_OPTIMIZER_TYPES = (K2.optimizers.Optimizer, K2.optimizers.legacy.Optimizer)


def _as_list(variables: Any) -> list[Any]:
    if callable(variables) and not isinstance(variables, list):
        variables = variables()
    return list(variables)


@K2.saving.register_keras_serializable(package="hvdcore", name="DistributedOptimizer")
class TfKerasDistributedOptimizer(K2.optimizers.Optimizer):
    """Keras 2 optimizer that averages gradients over hvdcore ranks, then applies ``optimizer``.

    Create it with :func:`hvdcore.tensorflow.keras.DistributedOptimizer`.
    """

    def __init__(self, optimizer: Any, name: str | None = None,
                 compression: type[Compressor] = Compression.none,
                 sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                 op: Any = Average, backward_passes_per_step: int = 1,
                 average_aggregated_gradients: bool = False,
                 process_set: Any = global_process_set,
                 scale_local_gradients: bool = True) -> None:
        if not isinstance(optimizer, TF_KERAS_OPTIMIZER_TYPES):
            raise UnsupportedError(f"expected a {K2.__name__} (Keras {K2.__version__}) "
                                   f"optimizer, got {type(optimizer)}")
        check_passes(backward_passes_per_step)
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}")
        self._optimizer = optimizer
        set_options(self, sparse_as_dense, gradient_predivide_factor, op,
                    backward_passes_per_step, average_aggregated_gradients,
                    scale_local_gradients)
        self._local = self._no_dependency(LocalVariables())
        self._reducer = self._no_dependency(GradientReducer(
            op, compression, sparse_as_dense, gradient_predivide_factor, process_set))
        self._accumulation: Accumulation | None = None

    @property
    def inner_optimizer(self) -> Any:
        """The wrapped optimizer."""
        return self._optimizer

    @property
    def reducer(self) -> GradientReducer:
        """The gradient reducer (op, compression, process set)."""
        return self._reducer

    def register_local_var(self, var: Any) -> None:
        """Keep ``var``'s gradient local to this rank (not reduced; divided by the set size
        when ``scale_local_gradients``), e.g. for model-parallel layers."""
        self._local.add(var)

    def build(self, var_list: list[Any]) -> None:
        """Create the wrapped optimizer's variables (and the accumulators, if any)."""
        if getattr(self, "_built", False):
            return
        super().build(var_list)
        if self.backward_passes_per_step > 1:
            counter = self.add_variable(shape=(), dtype=tf.int64, name="hvd_backward_passes")
            accs = {self._var_key(v): self.add_variable_from_reference(v, "hvd_accum")
                    for v in var_list}
            self._accumulation = self._no_dependency(Accumulation(
                counter, accs, self.backward_passes_per_step,
                self.average_aggregated_gradients))
        inner = self._optimizer
        if isinstance(inner, K2.optimizers.Optimizer):
            inner.build(var_list)
        else:  # legacy OptimizerV2: creates its slots on first use, under init_scope
            inner._create_all_weights(var_list)
        self._built = True

    def _own_variables(self) -> list[Any]:
        # this wrapper's own "iteration" variable is unused (``iterations`` is the wrapped
        # optimizer's); listing it would give two variables of that name in an .h5 file
        return [v for v in self._variables if v is not self._iterations]

    @property
    def variables(self) -> Any:
        return _CallableList(
            _as_list(self._optimizer.variables) + self._own_variables())

    def set_weights(self, weights: Any) -> None:
        """Assign ``weights`` in the order of :attr:`variables` (as .h5 loading does)."""
        variables = list(self.variables)
        if len(variables) != len(weights):
            raise ValueError(f"optimizer {self.name} has {len(variables)} variables, "
                             f"got {len(weights)} weights")
        for variable, weight in zip(variables, weights, strict=True):
            variable.assign(weight)

    @property
    def learning_rate(self) -> Any:
        return self._optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._optimizer.learning_rate = value

    @property
    def iterations(self) -> Any:
        return self._optimizer.iterations

    @iterations.setter
    def iterations(self, variable: Any) -> None:
        self._optimizer.iterations = variable

    def apply_gradients(self, grads_and_vars: Any, name: str | None = None,
                        skip_gradients_aggregation: bool = False, **kwargs: Any) -> Any:
        """Reduce the gradients over ranks and apply them with the wrapped optimizer."""
        pairs = list(grads_and_vars)
        variables = [v for _, v in pairs]
        if not getattr(self, "_built", False):
            with tf.init_scope():
                self.build(variables)

        def apply_fn(gs: list[Any], vs: list[Any]) -> None:
            self._optimizer.apply_gradients(list(zip(gs, vs, strict=False)))

        distributed_apply(self._reducer, [g for g, _ in pairs], variables, apply_fn,
                          self._accumulation, self._var_key, self._local,
                          self.scale_local_gradients, self._optimizer.iterations)
        return self.iterations

    def finalize_variable_values(self, var_list: Any) -> None:
        if hasattr(self._optimizer, "finalize_variable_values"):
            self._optimizer.finalize_variable_values(var_list)

    def get_config(self) -> dict[str, Any]:
        return options_config(self, K2.saving.serialize_keras_object(self._optimizer))

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> Any:
        config = copy.deepcopy(config)  # Keras 2's deserialize lower-cases class_name in place
        inner = K2.optimizers.deserialize(config.pop("optimizer"),
                                                custom_objects=custom_objects)
        return cls(inner, **config)
