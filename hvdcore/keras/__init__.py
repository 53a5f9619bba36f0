"""Alias of :mod:`hvdcore.tensorflow.keras` (the same objects), for ``import hvdcore.keras as hvd``.

Example::

    import hvdcore.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
"""

from __future__ import annotations

from hvdcore.tensorflow.keras import *  # noqa: F403  (includes the callbacks module)
from hvdcore.tensorflow.keras import __all__ as _keras_all

__all__ = list(_keras_all)
