"""MPI transport (mpi4py): blocking collectives on contiguous host buffers.

Blocking calls are safe because the engine executes the coordinator's responses in one global
order on every rank, so no two ranks can wait on different collectives. Buffers are NumPy
arrays in host memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from hvdcore.backends.base import HOST_DIRECT, displacements
from hvdcore.backends.host_buffers import HostBuffers

_OPS = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "prod": MPI.PROD}


class MPIBackend(HostBuffers):
    """:class:`~hvdcore.backends.base.Backend` over mpi4py communicators (a process set's
    ``comm``) and NumPy buffers (:class:`~hvdcore.backends.host_buffers.HostBuffers`)."""

    name = "mpi"
    reduces_float16 = False  # MPI has no half type: float16 is reduced in float32
    capabilities = HOST_DIRECT
    #: Changes whenever what :meth:`direct_allreduce` answers may change: a caller that kept
    #: its answer for a tensor checks this number instead of asking again on every call.
    routes = 0

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

    # -- process sets -----------------------------------------------------------------------

    def add_set(self, pset: Any) -> None:
        """Nothing to do: the engine made the set's communicator (``pset.comm``)."""

    def remove_set(self, pset: Any) -> None:
        """Nothing to do: the engine frees the set's communicator."""
