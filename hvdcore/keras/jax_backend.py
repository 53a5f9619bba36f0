"""hvdcore.keras on Keras 3's JAX backend (``KERAS_BACKEND=jax``).

Every name of the core :mod:`hvdcore` API (init, rank, NumPy collectives, ...), the JAX
``Compression`` of :mod:`hvdcore.keras.jax_ops`, and the Keras API of
:mod:`hvdcore.keras.portable`; gradients are reduced on the host by
:func:`hvdcore.grouped_allreduce` from inside Keras' jitted train step (MPI or Gloo). Neither
TensorFlow nor torch is imported.
"""

from __future__ import annotations

from hvdcore import *  # noqa: F403
from hvdcore import __all__ as _core_all
from hvdcore.keras.jax_ops import Compression
from hvdcore.keras.portable import *  # noqa: F403
from hvdcore.keras.portable import __all__ as _keras_all

__all__ = [*(n for n in _core_all if n not in ("capabilities", "__version__")), "Compression",
           *_keras_all]
