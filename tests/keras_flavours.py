"""The Keras flavours the installed TensorFlow offers, for the Keras tests' parameters.

TensorFlow >= 2.16: ``keras3`` (``keras``) and ``tf_keras`` (``TF_USE_LEGACY_KERAS=1``, where
the tf-keras package is installed). TensorFlow 2.13-2.15: ``keras2``, the Keras 2 they bundle
as ``keras`` (``tf.keras``). Read from the package metadata: no TensorFlow import at collection.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

__all__ = ["KERAS_FLAVOURS", "flavour_env"]


def _keras_major() -> int:
    try:
        return int(importlib.metadata.version("keras").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        return 0


KERAS_FLAVOURS = ["keras2"] if _keras_major() == 2 else ["keras3", "tf_keras"]


def flavour_env(flavour: str) -> dict[str, str]:
    """Environment for a program run with ``flavour`` (skips when tf-keras is missing)."""
    if flavour != "tf_keras":
        return {}
    if importlib.util.find_spec("tf_keras") is None:
        pytest.skip("tf-keras is not installed (pip install --no-deps tf-keras)")
    return {"TF_USE_LEGACY_KERAS": "1"}
