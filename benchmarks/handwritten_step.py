"""The hand-written synchronous step the benchmarks compare hvdcore's optimizer with.

What a careful user writes by hand over raw mpi4py: every gradient copied into one flat
buffer, one in-place ``MPI_Allreduce``, divided by the number of ranks, copied back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def averaging_step(params: list[Any], comm: Any) -> Callable[[], None]:
    """A function that averages ``params``' gradients over ``comm`` (call it after backward)."""
    import torch
    from mpi4py import MPI

    size = comm.Get_size()

    def reduce_grads() -> None:
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        comm.Allreduce(MPI.IN_PLACE, flat.numpy(), op=MPI.SUM)
        flat.div_(size)
        off = 0
        for p in params:
            n = p.grad.numel()
            p.grad.copy_(flat[off:off + n].view_as(p.grad))
            off += n
    return reduce_grads
