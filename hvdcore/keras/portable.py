"""hvdcore.keras off TensorFlow: the Keras names shared by every non-TensorFlow backend.

``DistributedOptimizer``, ``PartialDistributedOptimizer``, ``load_model``,
``broadcast_global_variables``, ``register_for_broadcast``, the ``callbacks`` module and
``elastic`` (:mod:`hvdcore.keras.portable_elastic`) and ``SyncBatchNormalization``
(:mod:`hvdcore.keras.sync_batch_norm`), built
on Keras 3 alone; the backend's binding does the reductions (:mod:`hvdcore.keras.routing`).
"""

from __future__ import annotations

from hvdcore.keras import portable_callbacks as callbacks
from hvdcore.keras import portable_elastic as elastic
from hvdcore.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer
from hvdcore.keras.saving import (
    broadcast_global_variables,
    load_model,
    register_for_broadcast,
)
from hvdcore.keras.sync_batch_norm import SyncBatchNormalization

__all__ = ["callbacks", "elastic", "DistributedOptimizer", "PartialDistributedOptimizer",
           "broadcast_global_variables", "load_model", "register_for_broadcast",
           "SyncBatchNormalization"]
