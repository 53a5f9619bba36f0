"""Gradient compression for the TensorFlow binding (Horovod's ``hvd.Compression``).

A compressor turns a tensor into the tensor that travels over the wire and back:
``compressed, ctx = C.compress(t)`` then ``C.decompress(reduced, ctx)``.

Example::

    >>> import tensorflow as tf
    >>> from hvdcore.tensorflow.compression import Compression
    >>> t, ctx = Compression.fp16.compress(tf.ones([2], tf.float32))
    >>> t.dtype.name, Compression.fp16.decompress(t, ctx).dtype.name
    ('float16', 'float32')
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class Compressor:
    """Interface: ``compress(tensor) -> (tensor, ctx)`` and ``decompress(tensor, ctx)``."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> tuple[tf.Tensor, Any]:
        """Return the tensor to send and the context needed to restore it."""
        return tensor, None

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        """Restore a received tensor using the context from :meth:`compress`."""
        return tensor


class NoneCompressor(Compressor):
    """No compression: tensors travel as they are."""


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 and are cast back afterwards."""

    @staticmethod
    def compress(tensor: tf.Tensor) -> tuple[tf.Tensor, Any]:
        dtype = tensor.dtype
        if dtype.is_floating and dtype != tf.float16:
            return tf.cast(tensor, tf.float16), dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: tf.Tensor, ctx: Any) -> tf.Tensor:
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """The available compressors: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
