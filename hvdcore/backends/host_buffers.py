"""The host data planes' buffers: NumPy arrays, pooled results, Horovod's CPU arithmetic.

Shared by every data plane whose buffers are host NumPy arrays, whatever moves the bytes:
:class:`~hvdcore.backends.mpi.MPIBackend` (mpi4py) and the Gloo controller's host plane
(:class:`hvdcore.controllers.gloo_host.GlooHostBackend`, torch.distributed Gloo).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hvdcore.backends.pool import ResultPool

__all__ = ["HostBuffers"]

_MATCH_FROM = 1 << 20  # results from this size on share their input's alignment


class HostBuffers:
    """The buffer half of :class:`~hvdcore.backends.base.Backend` on NumPy arrays."""

    def __init__(self) -> None:
        self._pool = ResultPool()

    def empty(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """See :meth:`Backend.empty`."""
        return np.empty(shape, dtype=dtype)

    def result_block(self, dtype: np.dtype, count: int, like: Any = None) -> np.ndarray:
        """A 1-d array of ``count`` elements for results handed to the caller (pooled: see
        :class:`~hvdcore.backends.pool.ResultPool`); from 1 MiB on it shares the alignment of
        ``like`` (the input array), which Open MPI's copies and adds run faster on."""
        if like is not None and like.nbytes >= _MATCH_FROM:
            return self._pool.take(dtype, count, like.ctypes.data)
        return self._pool.take(dtype, count)

    def pooled(self, nbytes: int) -> bool:
        """True when :meth:`result_block` of ``nbytes`` is pooled memory; else it is a fresh
        ``np.empty`` (which a caller that knows the shape may make itself)."""
        return self._pool.keeps(nbytes)

    @staticmethod
    def scale_into(dst: np.ndarray, src: np.ndarray, factor: float) -> None:
        """See :meth:`Backend.scale_into` (Horovod's CPU arithmetic)."""
        if factor == 1.0:
            np.copyto(dst, src, casting="unsafe")
        elif dst.dtype == np.float16 or src.dtype == np.float16:
            # float16 (or a float32 sum of float16 values): the value as float16, times the
            # factor in float32, rounded once to float16 (NumPy alone would round the factor
            # to float16 and multiply in float16)
            half = src if src.dtype == np.float16 else src.astype(np.float16)
            scaled = np.multiply(half, np.float32(factor), dtype=np.float32)
            np.copyto(dst, scaled if dst.dtype == np.float16 else scaled.astype(np.float16),
                      casting="unsafe")
        elif dst.dtype.kind == "f":  # float32 in float32, float64 in float64
            np.multiply(src, dst.dtype.type(factor), out=dst, casting="unsafe")
        else:  # integers: in float64, truncated toward zero into the dtype
            np.multiply(src, np.float64(factor), out=dst, casting="unsafe")

    @staticmethod
    def fill(dst: np.ndarray, value: Any) -> None:
        """See :meth:`Backend.fill`."""
        dst.fill(value)

    @staticmethod
    def concat_into(srcs: list[np.ndarray], dst: np.ndarray) -> None:
        """See :meth:`Backend.concat_into`."""
        np.concatenate(srcs, out=dst)

    def allreduce_pieces(self, pset: Any, srcs: list[np.ndarray], out: np.ndarray,
                         op: str) -> None:
        """See :meth:`Backend.allreduce_pieces`."""
        self.concat_into(srcs, out)
        self.allreduce(pset, out, out, op)  # type: ignore[attr-defined]

    @staticmethod
    def as_uint8(buf: np.ndarray) -> np.ndarray:
        """See :meth:`Backend.as_uint8`."""
        return buf.view(np.uint8)
