"""Which Keras 3 backend hvdcore.keras serves, read once from Keras.

Keras 3 runs the same model code on TensorFlow, PyTorch or JAX (``KERAS_BACKEND``).
hvdcore.keras reads ``keras.backend.backend()`` once, when it is first imported, and routes:
``tensorflow`` to :mod:`hvdcore.tensorflow.keras` (gradients reduced by TensorFlow ops),
``torch`` to :mod:`hvdcore.keras.torch_backend` (gradients reduced by the torch binding),
``jax`` to :mod:`hvdcore.keras.jax_backend` (gradients reduced on the host by the core).
Any other backend imports, but ``DistributedOptimizer`` refuses it with an error naming it.

    >>> backend()                     # KERAS_BACKEND=torch python ...   # doctest: +SKIP
    'torch'
"""

from __future__ import annotations

from typing import Any

from hvdcore.capability_probes import KERAS_BACKENDS
from hvdcore.errors import UnsupportedError

__all__ = ["SUPPORTED", "backend", "check_unchanged", "unsupported"]

#: The Keras backends hvdcore.keras trains on, and what reduces their gradients.
SUPPORTED = {
    "tensorflow": "hvdcore.tensorflow (TensorFlow ops around the core's NumPy buffers)",
    "torch": "hvdcore.torch (grouped_allreduce of the torch gradients: MPI, Gloo or NCCL)",
    "jax": "hvdcore's host plane (grouped_allreduce of NumPy copies, via jax io_callback)",
}

assert tuple(sorted(SUPPORTED)) == KERAS_BACKENDS  # what --check-build reports

_READ: list[str] = []
_PACKAGES = {"tensorflow": "tensorflow-cpu", "torch": "torch", "jax": "jax"}


def backend() -> str:
    """The Keras backend, as Keras reported it the first time this was called."""
    if not _READ:
        try:
            import keras
        except ImportError as exc:  # Keras imports its backend's framework first
            import os

            chosen = os.environ.get("KERAS_BACKEND", "tensorflow")
            if chosen in SUPPORTED:
                fix = f"install it (pip install {_PACKAGES[chosen]})"
            else:
                fix = (f"hvdcore.keras does not train on {chosen!r} either: set KERAS_BACKEND "
                       f"to {' or '.join(sorted(SUPPORTED))} and install that framework "
                       f"(pip install {' or '.join(_PACKAGES[b] for b in sorted(SUPPORTED))})")
            raise UnsupportedError(
                f"hvdcore.keras: Keras could not load its backend {chosen!r} (KERAS_BACKEND): "
                f"{exc}; {fix}") from exc
        _READ.append(str(keras.backend.backend()))
    return _READ[0]


def check_unchanged() -> str:
    """The backend; an error if Keras has switched backends since hvdcore.keras read it."""
    import keras

    now = str(keras.backend.backend())
    if now != backend():
        raise UnsupportedError(
            f"Keras' backend is now {now!r}, but hvdcore.keras was imported on {backend()!r}; "
            f"set KERAS_BACKEND before importing Keras and hvdcore.keras, and do not call "
            f"keras.config.set_backend afterwards")
    return now


def unsupported(what: str, name: str | None = None) -> UnsupportedError:
    """The error for ``what`` on a Keras backend hvdcore.keras does not train on."""
    name = name or backend()
    return UnsupportedError(
        f"{what}: Keras backend {name!r} (KERAS_BACKEND) is not supported by hvdcore.keras; "
        f"supported: {', '.join(sorted(SUPPORTED))}")


def describe(obj: Any) -> str:
    """``module.Class`` of ``obj``, for error messages."""
    return f"{type(obj).__module__}.{type(obj).__name__}"
