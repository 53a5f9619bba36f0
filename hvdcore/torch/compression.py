"""Gradient compression applied around allreduce (Horovod's ``hvd.Compression``).

Example::

    >>> import hvdcore.torch as hvd
    >>> opt = hvd.DistributedOptimizer(opt, compression=hvd.Compression.fp16)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class Compressor:
    """Interface: ``compress(tensor) -> (tensor, ctx)``, ``decompress(tensor, ctx) -> tensor``."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Return the tensor to send and the context needed to undo the compression."""
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Undo :meth:`compress` on a received tensor."""
        return tensor


class NoneCompressor(Compressor):
    """No compression: tensors are sent as they are."""


class FP16Compressor(Compressor):
    """Send floating-point tensors as float16 (half the bytes); other dtypes are unchanged."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Cast a floating-point tensor to float16; ``ctx`` is the original dtype."""
        if tensor.is_floating_point() and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        """Cast back to the original dtype."""
        return tensor if ctx is None else tensor.to(ctx)


class Compression:
    """The available compressors: ``Compression.none`` and ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
