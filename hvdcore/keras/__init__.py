"""hvdcore for Keras 3 on its backend: ``import hvdcore.keras as hvd``.

The Keras backend (``KERAS_BACKEND``) is read once, at the first import, and picks the
implementation:

- ``tensorflow``: the same objects as :mod:`hvdcore.tensorflow.keras` (Keras 3 or tf-keras);
- ``torch``: :mod:`hvdcore.keras.torch_backend` (the :mod:`hvdcore.torch` API; gradients
  reduced by the torch binding; TensorFlow not needed);
- ``jax``: :mod:`hvdcore.keras.jax_backend` (the core's NumPy API; gradients reduced on the
  host from inside the jitted train step; TensorFlow and torch not needed);
- anything else: importable, but ``DistributedOptimizer`` raises an error naming the backend.

``SyncBatchNormalization`` is on every backend: hvdcore.tensorflow's layer on TensorFlow,
:mod:`hvdcore.keras.sync_batch_norm`'s on torch and JAX (the same saved name).

Example::

    import keras
    import hvdcore.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
"""

from __future__ import annotations

from hvdcore.keras.backend import backend as _backend

if _backend() == "tensorflow":
    from hvdcore.tensorflow.keras import *  # noqa: F403  (includes the callbacks module)
    from hvdcore.tensorflow.keras import __all__ as _keras_all
elif _backend() == "torch":
    from hvdcore.keras.torch_backend import *  # noqa: F403
    from hvdcore.keras.torch_backend import __all__ as _keras_all
elif _backend() == "jax":
    from hvdcore.keras.jax_backend import *  # noqa: F403
    from hvdcore.keras.jax_backend import __all__ as _keras_all
else:
    from hvdcore.keras.other_backend import *  # noqa: F403
    from hvdcore.keras.other_backend import __all__ as _keras_all

__all__ = list(_keras_all)


def __getattr__(name: str) -> object:
    """``SyncBatchNormalization`` on the TensorFlow backend: hvdcore.tensorflow's layer, made on
    first use (the other backends have :mod:`hvdcore.keras.sync_batch_norm`'s in ``__all__``)."""
    if name == "SyncBatchNormalization" and _backend() == "tensorflow":
        from hvdcore.tensorflow import SyncBatchNormalization

        return SyncBatchNormalization
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
