"""hvdcore.keras off TensorFlow: the Keras names shared by every non-TensorFlow backend.

``DistributedOptimizer``, ``PartialDistributedOptimizer``, ``load_model``,
``broadcast_global_variables``, ``register_for_broadcast`` and the ``callbacks`` module, built
on Keras 3 alone; the backend's binding does the reductions (:mod:`hvdcore.keras.routing`).
"""

from __future__ import annotations

from hvdcore.keras import portable_callbacks as callbacks
from hvdcore.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer
from hvdcore.keras.saving import (
    broadcast_global_variables,
    load_model,
    register_for_broadcast,
)

__all__ = ["callbacks", "DistributedOptimizer", "PartialDistributedOptimizer",
           "broadcast_global_variables", "load_model", "register_for_broadcast"]
