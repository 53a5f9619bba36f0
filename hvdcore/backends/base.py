"""The two protocols below the engine.

:class:`Backend` is the data plane: the collectives that move tensor bytes, one implementation
per transport (MPI today; the device path adds more). :class:`ControlPlane` is how the ranks'
engines agree on what to run; it is always MPI. The engine imports neither mpi4py nor a
framework: everything it does between ranks goes through these two.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class Backend(Protocol):
    """Collectives on contiguous NumPy buffers over one group of ranks (a process set)."""

    name: str

    def allreduce(self, comm: Any, buf: np.ndarray, out: np.ndarray, op: str) -> None:
        """Reduce ``buf`` element-wise across ranks into ``out`` (``out is buf``: in place).

        ``op`` is one of "sum", "min", "max", "prod".
        """

    def allgatherv(self, comm: Any, buf: np.ndarray, out: np.ndarray, counts: list[int]) -> None:
        """Concatenate every rank's ``buf`` (``counts[r]`` bytes from rank r) into ``out``."""

    def broadcast(self, comm: Any, buf: np.ndarray, root: int) -> None:
        """Overwrite ``buf`` on every rank with root's ``buf`` (root is a rank of ``comm``)."""

    def alltoallv(
        self, comm: Any, buf: np.ndarray, send_bytes: list[int], out: np.ndarray,
        recv_bytes: list[int],
    ) -> None:
        """Send ``send_bytes[r]`` consecutive bytes of ``buf`` to rank r; receive into ``out``."""

    def reduce_scatter(
        self, comm: Any, buf: np.ndarray, out: np.ndarray, counts: list[int], op: str
    ) -> None:
        """Reduce ``buf`` across ranks; rank r receives ``counts[r]`` elements into ``out``."""

    def barrier(self, comm: Any) -> None:
        """Wait until every rank of ``comm`` arrives."""


class RoundRequest(Protocol):
    """An outstanding cache round (mpi4py's ``Request`` has this shape)."""

    def Test(self) -> bool:  # noqa: N802 - the name mpi4py gives it
        """True once the round has completed (drives it forward)."""


class ControlPlane(Protocol):
    """How the engines of a job talk to each other (never the tensors themselves).

    Announcements to the coordinator, its ordered response lists, the response cache's
    rounds, communicators for new process sets, and ending the job. Only MPI implements it
    (:class:`~hvdcore.backends.mpi_control.MPIControlPlane`): whatever moves the data, the
    agreement between ranks always goes over MPI.
    """

    rank: int
    size: int

    def send(self, payload: bytes, dest: int, tag: int) -> None:
        """Start sending ``payload`` to rank ``dest``; it is kept alive until delivered."""

    def flush(self) -> bool:
        """Complete the sends that have finished; True while some are still in flight."""

    def receive(self, source: int | None, tag: int) -> tuple[int, bytes] | None:
        """``(sender, payload)`` of one waiting message with ``tag`` (from ``source``, or
        any rank for None), or None when none has arrived. Never blocks."""

    def start_round(self, send: bytearray, recv: bytearray) -> RoundRequest:
        """Start a bitwise-or allreduce of ``send`` (uint64 words) into ``recv``."""

    def split(self, parent: Any, member: bool, key: int) -> Any:
        """Collective over ``parent``: a communicator of the members (None on the others)."""

    def free(self, comm: Any) -> None:
        """Release a communicator made by :meth:`split` (or by ``init``)."""

    def close(self) -> None:
        """Release the plane's own communicators (after the engine has stopped)."""

    def abort(self, code: int) -> None:
        """End every process of the job with exit status ``code``."""
