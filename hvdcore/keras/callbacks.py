"""Alias of :mod:`hvdcore.tensorflow.keras.callbacks` (the same classes)."""

from hvdcore.tensorflow.keras.callbacks import *  # noqa: F403
from hvdcore.tensorflow.keras.callbacks import __all__ as __all__  # noqa: F401
