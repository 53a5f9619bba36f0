"""hvdcore.keras on a Keras backend it does not train on (numpy, openvino).

Importing works (``init``, ``rank``, the core's NumPy collectives, ...); ``DistributedOptimizer``
and the variable broadcasts raise :class:`~hvdcore.errors.UnsupportedError` naming the backend
and the supported ones, before Keras runs anything.
"""

from __future__ import annotations

from hvdcore import *  # noqa: F403
from hvdcore import __all__ as _core_all
from hvdcore.keras.portable import *  # noqa: F403
from hvdcore.keras.portable import __all__ as _keras_all

__all__ = [*(n for n in _core_all if n not in ("capabilities", "__version__")), *_keras_all]
