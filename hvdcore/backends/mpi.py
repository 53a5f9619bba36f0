"""MPI transport (mpi4py): blocking collectives on contiguous host buffers.

Blocking calls are safe because the engine executes the coordinator's responses in one global
order on every rank, so no two ranks can wait on different collectives. Buffers are NumPy
arrays in host memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from hvdcore.backends.base import displacements
from hvdcore.backends.pool import ResultPool

_OPS = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "prod": MPI.PROD}
_MATCH_FROM = 1 << 20  # results from this size on share their input's alignment


class MPIBackend:
    """:class:`~hvdcore.backends.base.Backend` over mpi4py communicators (a process set's
    ``comm``) and NumPy buffers."""

    name = "mpi"
    reduces_float16 = False  # MPI has no half type: float16 is reduced in float32
    #: Changes whenever what :meth:`direct_allreduce` answers may change: a caller that kept
    #: its answer for a tensor checks this number instead of asking again on every call.
    routes = 0

    def __init__(self) -> None:
        self._pool = ResultPool()

    # -- collectives ------------------------------------------------------------------------

    def allreduce(self, pset: Any, buf: np.ndarray, out: np.ndarray, op: str) -> None:
        """See :meth:`Backend.allreduce`."""
        if out is buf:
            pset.comm.Allreduce(MPI.IN_PLACE, out, op=_OPS[op])
        else:
            pset.comm.Allreduce(buf, out, op=_OPS[op])

    def direct_allreduce(self, pset: Any, nbytes: int) -> tuple[Any, Any] | None:
        """``(communicator, op table)`` when :meth:`allreduce` of ``nbytes`` on ``pset`` is
        one ``MPI_Allreduce`` on that communicator with the op ``table[op]``, which the
        steady path (:mod:`hvdcore.backends.mpi_steady`) may then make itself; else None."""
        return pset.comm, _OPS

    def allgatherv(self, pset: Any, buf: np.ndarray, out: np.ndarray, counts: list[int]) -> None:
        """See :meth:`Backend.allgatherv` (byte counts)."""
        pset.comm.Allgatherv(
            [buf.reshape(-1).view(np.uint8), MPI.BYTE],
            [out.reshape(-1).view(np.uint8), (counts, displacements(counts)), MPI.BYTE],
        )

    def broadcast(self, pset: Any, buf: np.ndarray, root: int) -> None:
        """See :meth:`Backend.broadcast`."""
        pset.comm.Bcast([buf.reshape(-1).view(np.uint8), MPI.BYTE], root=root)

    def alltoallv(
        self, pset: Any, buf: np.ndarray, send_bytes: list[int], out: np.ndarray,
        recv_bytes: list[int],
    ) -> None:
        """See :meth:`Backend.alltoallv`."""
        pset.comm.Alltoallv(
            [buf.reshape(-1).view(np.uint8), (send_bytes, displacements(send_bytes)), MPI.BYTE],
            [out.reshape(-1).view(np.uint8), (recv_bytes, displacements(recv_bytes)), MPI.BYTE],
        )

    def reduce_scatter(
        self, pset: Any, buf: np.ndarray, out: np.ndarray, counts: list[int], op: str
    ) -> None:
        """See :meth:`Backend.reduce_scatter` (element counts)."""
        pset.comm.Reduce_scatter(buf.reshape(-1), out.reshape(-1), recvcounts=counts,
                                 op=_OPS[op])

    def barrier(self, pset: Any) -> None:
        """See :meth:`Backend.barrier`."""
        pset.comm.Barrier()

    # -- buffers ----------------------------------------------------------------------------

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
        self.allreduce(pset, out, out, op)

    @staticmethod
    def as_uint8(buf: np.ndarray) -> np.ndarray:
        """See :meth:`Backend.as_uint8`."""
        return buf.view(np.uint8)

    # -- process sets -----------------------------------------------------------------------

    def add_set(self, pset: Any) -> None:
        """Nothing to do: the engine made the set's communicator (``pset.comm``)."""

    def remove_set(self, pset: Any) -> None:
        """Nothing to do: the engine frees the set's communicator."""
