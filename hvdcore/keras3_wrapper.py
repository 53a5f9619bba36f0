"""What hvdcore's two Keras 3 ``DistributedOptimizer`` wrappers share: delegation to the
optimizer they wrap, the weights' order, the build-on-first-apply rule and the config round trip.

:class:`hvdcore.tensorflow.keras.optimizer_keras3.Keras3DistributedOptimizer` (TensorFlow
backend) and :class:`hvdcore.keras.eager_optimizer.EagerDistributedOptimizer` (torch and JAX)
put :class:`WrapsKeras3Optimizer` before ``keras.optimizers.Optimizer``; each keeps its own
reduction (``apply``) and ``build``.
"""

from __future__ import annotations

import copy
from typing import Any

import keras
import numpy as np

__all__ = ["WrapsKeras3Optimizer"]


class WrapsKeras3Optimizer:
    """Mixin: a Keras 3 optimizer that holds ``inner_optimizer`` and hvdcore state ``_hvd``
    (with ``reducer`` and ``local``)."""

    inner_optimizer: Any
    _hvd: Any

    @property
    def reducer(self) -> Any:
        """The gradient reducer (op, compression, process set)."""
        return self._hvd.reducer

    def register_local_var(self, var: Any) -> None:
        """Keep ``var``'s gradient local to this rank (not reduced; divided by the set size
        when ``scale_local_gradients``), e.g. for model-parallel layers."""
        self._hvd.local.add(var)

    @property
    def variables(self) -> list[Any]:
        return self._variables + self.inner_optimizer.variables  # type: ignore[attr-defined]

    def set_weights(self, weights: Any) -> None:
        """Assign ``weights`` in the order of :attr:`variables`, as far as both go.

        The base class would fill only this wrapper's own variables. Keras 3's .h5 loader
        builds the optimizer before the model's variables are known, so, as for a plain Keras
        optimizer, only the leading variables (iterations, learning rates) are restored then.
        """
        for variable, weight in zip(self.variables, weights, strict=False):
            if tuple(variable.shape) != tuple(np.shape(weight)):
                raise ValueError(f"optimizer variable {variable.path} has shape "
                                 f"{tuple(variable.shape)}, the saved weight {np.shape(weight)}")
            variable.assign(weight)

    @property
    def learning_rate(self) -> Any:
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self.inner_optimizer.learning_rate = value

    @property
    def iterations(self) -> Any:
        return self.inner_optimizer.iterations

    def scale_loss(self, loss: Any) -> Any:
        return self.inner_optimizer.scale_loss(loss)

    def _built_for(self, grads: Any, trainable_variables: Any) -> tuple[list[Any], list[Any]]:
        """``apply``'s arguments as lists, the wrapper built for them if it is not yet."""
        grads = list(grads)
        if trainable_variables is None:
            if not self.built:  # type: ignore[attr-defined,has-type]
                raise ValueError("call optimizer.build(trainable_variables) before apply(grads)")
            trainable_variables = self._trainable_variables  # type: ignore[attr-defined]
        trainable_variables = list(trainable_variables)
        if not self.built:  # type: ignore[attr-defined,has-type]
            with keras.name_scope(self.name, caller=self):  # type: ignore[attr-defined]
                self.build(trainable_variables)  # type: ignore[attr-defined]
            self.built = True
        return grads, trainable_variables

    def apply_gradients(self, grads_and_vars: Any) -> Any:
        grads, variables = zip(*grads_and_vars, strict=False)
        self.apply(grads, variables)  # type: ignore[attr-defined]
        return self.iterations

    def finalize_variable_values(self, var_list: Any) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> Any:
        config = copy.deepcopy(config)  # deserializing may edit the nested dict in place
        inner = keras.saving.deserialize_keras_object(config.pop("optimizer"),
                                                      custom_objects=custom_objects)
        return cls(inner, **config)  # type: ignore[call-arg]
