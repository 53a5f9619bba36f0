"""The callbacks of hvdcore.keras' backend: :mod:`hvdcore.tensorflow.keras.callbacks` on
TensorFlow, :mod:`hvdcore.keras.portable_callbacks` elsewhere (the same names)."""

from hvdcore.keras.backend import backend as _backend

if _backend() == "tensorflow":
    from hvdcore.tensorflow.keras.callbacks import *  # noqa: F403
    from hvdcore.tensorflow.keras.callbacks import __all__ as __all__  # noqa: F401
else:
    from hvdcore.keras.portable_callbacks import *  # noqa: F403
    from hvdcore.keras.portable_callbacks import __all__ as __all__  # noqa: F401
