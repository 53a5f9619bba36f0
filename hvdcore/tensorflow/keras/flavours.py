"""Which Keras an optimizer belongs to, and which package is this TensorFlow's Keras 2.

TensorFlow 2.13-2.15 bundle Keras 2 as ``keras`` (``tf.keras``); from 2.16 on ``keras`` is
Keras 3 and Keras 2 is the separate ``tf_keras`` package (``TF_USE_LEGACY_KERAS=1``).
Both Keras 2 packages have the same optimizer API, so one wrapper serves them
(:mod:`hvdcore.tensorflow.keras.optimizer_tf_keras`); Keras 3 optimizers get
:mod:`hvdcore.tensorflow.keras.optimizer_keras3`.

    >>> optimizer_flavour(keras.optimizers.SGD())   # TensorFlow 2.18: Keras 3
    'keras3'
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["keras_major", "keras2_package", "optimizer_flavour"]


def keras_major() -> int:
    """Major version of the installed ``keras`` package (2 on TensorFlow 2.13-2.15)."""
    import keras

    return int(str(keras.__version__).split(".")[0])


def keras2_package() -> ModuleType:
    """This TensorFlow's Keras 2: ``keras`` itself where it is Keras 2, else ``tf_keras``."""
    if keras_major() < 3:
        return importlib.import_module("keras")
    return importlib.import_module("tf_keras")


def optimizer_flavour(optimizer: Any) -> str:
    """``"keras3"``, ``"keras2"`` (tf-keras, or the ``keras`` of TensorFlow <= 2.15) or
    ``"unknown"``, from the packages of the optimizer's classes."""
    for cls in type(optimizer).__mro__:
        module = cls.__module__ or ""
        if module.startswith("tf_keras."):
            return "keras2"
        if module.startswith("keras."):
            return "keras3" if keras_major() >= 3 else "keras2"
    return "unknown"
