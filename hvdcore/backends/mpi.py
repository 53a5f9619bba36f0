"""MPI transport (mpi4py): blocking collectives on contiguous host buffers.

Blocking calls are safe because the engine executes the coordinator's responses in one global
order on every rank, so no two ranks can wait on different collectives.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

_OPS = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "prod": MPI.PROD}


def _displs(counts: list[int]) -> list[int]:
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out


class MPIBackend:
    """:class:`~hvdcore.backends.base.Backend` over mpi4py communicators."""

    name = "mpi"

    def allreduce(self, comm: Any, buf: np.ndarray, out: np.ndarray, op: str) -> None:
        """See :meth:`Backend.allreduce`."""
        if out is buf:
            comm.Allreduce(MPI.IN_PLACE, out, op=_OPS[op])
        else:
            comm.Allreduce(buf, out, op=_OPS[op])

    def allgatherv(self, comm: Any, buf: np.ndarray, out: np.ndarray, counts: list[int]) -> None:
        """See :meth:`Backend.allgatherv` (byte counts)."""
        comm.Allgatherv(
            [buf.reshape(-1).view(np.uint8), MPI.BYTE],
            [out.reshape(-1).view(np.uint8), (counts, _displs(counts)), MPI.BYTE],
        )

    def broadcast(self, comm: Any, buf: np.ndarray, root: int) -> None:
        """See :meth:`Backend.broadcast`."""
        comm.Bcast([buf.reshape(-1).view(np.uint8), MPI.BYTE], root=root)

    def alltoallv(
        self, comm: Any, buf: np.ndarray, send_bytes: list[int], out: np.ndarray,
        recv_bytes: list[int],
    ) -> None:
        """See :meth:`Backend.alltoallv`."""
        comm.Alltoallv(
            [buf.reshape(-1).view(np.uint8), (send_bytes, _displs(send_bytes)), MPI.BYTE],
            [out.reshape(-1).view(np.uint8), (recv_bytes, _displs(recv_bytes)), MPI.BYTE],
        )

    def reduce_scatter(
        self, comm: Any, buf: np.ndarray, out: np.ndarray, counts: list[int], op: str
    ) -> None:
        """See :meth:`Backend.reduce_scatter` (element counts)."""
        comm.Reduce_scatter(buf.reshape(-1), out.reshape(-1), recvcounts=counts, op=_OPS[op])

    def barrier(self, comm: Any) -> None:
        """See :meth:`Backend.barrier`."""
        comm.Barrier()
