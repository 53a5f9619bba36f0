"""The small protocol every transport implements (host NumPy buffers, one communicator each)."""

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
