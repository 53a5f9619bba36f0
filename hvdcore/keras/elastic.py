"""``hvd.elastic`` of hvdcore.keras' backend: :mod:`hvdcore.tensorflow.keras.elastic` on
TensorFlow, :mod:`hvdcore.keras.portable_elastic` on torch and JAX (the same names)."""

from hvdcore.keras.backend import backend as _backend

if _backend() == "tensorflow":
    from hvdcore.tensorflow.keras.elastic import *  # noqa: F403
    from hvdcore.tensorflow.keras.elastic import __all__ as __all__  # noqa: F401
else:
    from hvdcore.keras.portable_elastic import *  # type: ignore[assignment]  # noqa: F403
    from hvdcore.keras.portable_elastic import __all__ as __all__  # noqa: F401
