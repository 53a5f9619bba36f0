"""The Gloo controller's host data plane: NumPy buffers reduced by torch.distributed Gloo.

Host arrays (NumPy, TensorFlow's host tensors, torch CPU tensors through their NumPy views)
reach it as NumPy arrays; each collective hands Gloo zero-copy torch views of them
(``torch.from_numpy``), on the process set's private Gloo group. Buffers and Horovod's CPU
arithmetic are :class:`~hvdcore.backends.host_buffers.HostBuffers`', as on the MPI plane; float16
is reduced in a float32 buffer, as there.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hvdcore.backends.base import HOST_DIRECT
from hvdcore.backends.host_buffers import HostBuffers
from hvdcore.controllers.mesh_data import mesh_allreduce, mesh_fits

__all__ = ["GlooHostBackend"]

# Gloo only reads a collective's send buffer; torch warns about any read-only NumPy view
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
# torch 2.13 renamed the tensor-to-tensor gather; older releases have the old name only
_GATHER_INTO = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
        "prod": dist.ReduceOp.PRODUCT}


def _t(arr: np.ndarray) -> torch.Tensor:
    """A 1-d torch view of ``arr``'s memory (bool as uint8: Gloo reduces bytes)."""
    flat = arr.reshape(-1)
    return torch.from_numpy(flat.view(np.uint8) if flat.dtype == np.bool_ else flat)


def _bytes(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(arr.reshape(-1).view(np.uint8))


class GlooHostBackend(HostBuffers):
    """:class:`~hvdcore.backends.base.Backend` on NumPy arrays over Gloo groups
    (``pset.comm`` is a :class:`~hvdcore.controllers.gloo_control.GlooComm`)."""

    name = "gloo"
    reduces_float16 = False  # as the MPI host plane: float16 sums in float32, rounded once
    capabilities = HOST_DIRECT
    routes = 0  # what direct_allreduce answers never changes

    def allreduce(self, pset: Any, buf: np.ndarray, out: np.ndarray, op: str) -> None:
        """See :meth:`Backend.allreduce` (a small one of the global set on the round
        connections: :mod:`hvdcore.controllers.mesh_data`)."""
        mesh = pset.comm.mesh
        if mesh is not None and mesh_fits(mesh, out):
            mesh_allreduce(mesh, buf, out, op)
            return
        if out is not buf:
            np.copyto(out, buf)
        dist.all_reduce(_t(out), op=_OPS[op], group=pset.comm.group)

    def direct_allreduce(self, pset: Any, nbytes: int) -> tuple[Any, Any]:
        """``(pset.comm, op table)``: :meth:`allreduce` is one Gloo allreduce on the set's
        group, which the Gloo controller's steady call
        (:class:`~hvdcore.controllers.gloo_control.GlooSteady`) may make itself."""
        return pset.comm, _OPS

    def allgatherv(self, pset: Any, buf: np.ndarray, out: np.ndarray, counts: list[int]) -> None:
        """See :meth:`Backend.allgatherv` (byte counts; Gloo gathers equal blocks, so each
        rank's block is padded to the longest)."""
        longest = max(counts)
        dst = _bytes(out)
        if all(c == longest for c in counts):
            _GATHER_INTO(dst, _bytes(buf), group=pset.comm.group)
            return
        padded = torch.zeros(longest, dtype=torch.uint8)
        padded[: counts[pset.index]] = _bytes(buf)
        gathered = torch.empty(longest * len(counts), dtype=torch.uint8)
        _GATHER_INTO(gathered, padded, group=pset.comm.group)
        off = 0
        for i, c in enumerate(counts):
            dst[off:off + c] = gathered[i * longest: i * longest + c]
            off += c

    def broadcast(self, pset: Any, buf: np.ndarray, root: int) -> None:
        """See :meth:`Backend.broadcast` (``root`` indexes the set's ranks)."""
        dist.broadcast(_bytes(buf), src=pset.ranks[root], group=pset.comm.group)

    def alltoallv(self, pset: Any, buf: np.ndarray, send_bytes: list[int], out: np.ndarray,
                  recv_bytes: list[int]) -> None:
        """See :meth:`Backend.alltoallv`."""
        dist.all_to_all_single(_bytes(out), _bytes(buf), output_split_sizes=recv_bytes,
                               input_split_sizes=send_bytes, group=pset.comm.group)

    def reduce_scatter(self, pset: Any, buf: np.ndarray, out: np.ndarray, counts: list[int],
                       op: str) -> None:
        """See :meth:`Backend.reduce_scatter` (element counts): the full reduction, then this
        rank's block (Gloo has no reduce-scatter of uneven blocks)."""
        whole = np.array(buf.reshape(-1), copy=True)
        dist.all_reduce(_t(whole), op=_OPS[op], group=pset.comm.group)
        start = sum(counts[: pset.index])
        np.copyto(out.reshape(-1), whole[start:start + counts[pset.index]])

    def barrier(self, pset: Any) -> None:
        """See :meth:`Backend.barrier`."""
        dist.barrier(group=pset.comm.group)

    def add_set(self, pset: Any) -> None:
        """Nothing to do: the control plane made the set's group (``pset.comm``)."""

    def remove_set(self, pset: Any) -> None:
        """Nothing to do: the engine frees the set's group."""
