"""Eager tensors to the core's NumPy arrays and back, without copies where TensorFlow allows.

``Tensor.numpy()`` copies the tensor's buffer, and ``tf.convert_to_tensor`` copies an array
back (measured here, TF 2.21: 22 us and 39 us at 1 MiB, 0.5 ms and 1.2 ms at 16 MiB, and ~8 us
of Python even at 4 KiB). Instead:

* inputs: ``np.asarray(tensor)`` is a read-only view of an eager CPU tensor's own buffer (TF
  2.13 to 2.21); the core only reads its inputs, and the view keeps the tensor alive;
* results: a DLPack import shares the array's memory with the new tensor (~1 us at any size),
  and the capsule keeps the array alive for as long as the tensor lives.

TensorFlow's CPU kernels require buffers aligned to 64 bytes (Eigen's largest alignment). A
less aligned DLPack import is accepted, and the process then aborts in the first kernel that
checks (``Check failed: IsAligned()``): such results (fused views, small fresh arrays) are
copied into aligned memory first, which still costs less than ``convert_to_tensor``. The core's
pooled result blocks start on 64-byte boundaries (:mod:`hvdcore.backends.pool`), so a plain
allreduce result of 32 KiB or more goes back without any copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from hvdcore.backends.pool import ALIGNMENT, aligned_empty

__all__ = ["ALIGNMENT", "aligned_copy", "host_view", "to_eager"]


try:
    _from_dlpack: Any = tf.experimental.dlpack.from_dlpack
except AttributeError:  # a TensorFlow without DLPack: results are converted (copied)
    _from_dlpack = None

# dtypes this NumPy / TensorFlow pair cannot exchange through DLPack (bool before NumPy 1.25),
# found on first use: those results are converted instead.
_NO_DLPACK: set[str] = set()


def host_view(tensor: tf.Tensor) -> np.ndarray:
    """The NumPy array the core reads for an eager ``tensor``: a read-only view of its buffer
    for a CPU tensor (a copy to host memory for a device tensor, as ``numpy()`` makes)."""
    return np.asarray(tensor)


def to_eager(array: np.ndarray) -> tf.Tensor:
    """An eager tensor holding ``array``'s values: ``array``'s own memory when it is aligned,
    C-contiguous and writeable (the tensor then owns the array: do not modify it afterwards),
    else an aligned copy of it.

    Example::

        >>> to_eager(np.ones(3, np.float32))   # doctest: +SKIP
        <tf.Tensor: shape=(3,), dtype=float32, numpy=array([1., 1., 1.], dtype=float32)>
    """
    key = array.dtype.str
    if _from_dlpack is None or key in _NO_DLPACK or array.size == 0:
        return tf.convert_to_tensor(array)
    if not (array.flags.c_contiguous and array.flags.writeable
            and array.ctypes.data % ALIGNMENT == 0):
        array = aligned_copy(array)
    try:
        return _from_dlpack(array.__dlpack__())
    except (BufferError, TypeError, ValueError, tf.errors.InvalidArgumentError):
        _NO_DLPACK.add(key)
        return tf.convert_to_tensor(array)


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """A writeable C-contiguous copy of ``array`` whose data starts on an ALIGNMENT boundary."""
    out = aligned_empty(array.nbytes, array.dtype).reshape(array.shape)
    np.copyto(out, array)
    return out
