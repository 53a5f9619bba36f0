"""Small host allreduces of the Gloo controller's global set on the round connections.

A Gloo allreduce of a few KiB costs what any Gloo collective costs (~300 us on a 2-core VM:
its worker and device threads), several times a TCP exchange. Below a size, the global set's
host allreduce is instead an allgather on the round connections
(:meth:`hvdcore.controllers.round_mesh.RoundMesh.allgather`) and a reduction of the blocks in
rank order on every rank: the same operations in the same order everywhere, so every rank gets
the same bits. The rule (:func:`mesh_fits`) depends only on the size, the dtype and the job, so
every rank and every path of the engine (the steady call and the executor) takes the same
route for the same tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MESH_BYTES", "mesh_fits", "mesh_allreduce"]

#: The most bytes one rank receives in a mesh allreduce (size x bytes of the tensor): above it
#: Gloo's ring moves less data per rank.
MESH_BYTES = 256 * 1024

_UFUNCS = {"sum": np.add, "min": np.minimum, "max": np.maximum, "prod": np.multiply}


def mesh_fits(mesh: Any, arr: np.ndarray) -> bool:
    """Whether the allreduce of ``arr`` goes on the mesh (numeric, contiguous, not empty,
    small enough)."""
    return (mesh.size > 1 and arr.dtype.kind in "iuf" and arr.flags.c_contiguous
            and 0 < arr.nbytes * mesh.size <= MESH_BYTES)


def mesh_allreduce(mesh: Any, src: np.ndarray, dst: np.ndarray, op: str) -> None:
    """Reduce ``src`` across the job into ``dst`` with ``op`` ("sum", "min", "max", "prod"):
    every rank's block, then ``op`` over them in rank order."""
    blocks = mesh.allgather(np.ascontiguousarray(src).reshape(-1).view(np.uint8).tobytes())
    ufunc = _UFUNCS[op]
    out = dst.reshape(-1)
    np.copyto(out, np.frombuffer(blocks[0], dtype=dst.dtype))
    for block in blocks[1:]:
        ufunc(out, np.frombuffer(block, dtype=dst.dtype), out=out)
