"""Torch tensors <-> the core's NumPy buffers, zero-copy where PyTorch allows it.

CPU tensors of a dtype the core supports are handed to the engine as ``Tensor.numpy()`` views
(no copy, strided views for non-contiguous tensors); results are written straight into the
output tensor's memory through the core's ``out=`` argument. Dtypes the core does not know are
staged: reductions widen ``bfloat16``/``float8`` to ``float32`` and small/unsigned integers to
``int32``/``int64`` (complex numbers are reduced as their real/imaginary pairs); data-moving
collectives (broadcast, allgather, alltoall) reinterpret the bytes as ``uint8``, which is exact
for every dtype. Tensors for a torch.distributed data plane (``on_device=True``) get the same
treatment on their own device, contiguous; device tensors that take no such plane are copied
to host memory and back (see :mod:`hvdcore.torch.dataplanes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from hvdcore.errors import ArgumentError

__all__ = ["CORE_DTYPES", "HostBuffer", "reduce_buffer", "bytes_buffer", "result_tensor"]

CORE_DTYPES = frozenset({
    torch.uint8, torch.int8, torch.int32, torch.int64,
    torch.float16, torch.float32, torch.float64, torch.bool,
})
"""Torch dtypes whose ``numpy()`` view the core reduces and moves directly."""

_REDUCE_WIDEN: dict[torch.dtype, torch.dtype] = {
    torch.bfloat16: torch.float32,
    torch.int16: torch.int32,
}
for _name, _wide in (("uint16", torch.int32), ("uint32", torch.int64),
                     ("float8_e4m3fn", torch.float32), ("float8_e5m2", torch.float32)):
    if hasattr(torch, _name):
        _REDUCE_WIDEN[getattr(torch, _name)] = _wide


@dataclass
class HostBuffer:
    """A CPU tensor of a core dtype standing for a user tensor, and how to map results back.

    ``work`` shares memory with the user tensor when ``shared`` is True (zero-copy).
    ``kind`` is ``"same"``, ``"widen"``, ``"complex"`` or ``"bytes"``.
    """

    source: torch.Tensor
    work: torch.Tensor
    shared: bool
    kind: str

    def array(self) -> np.ndarray:
        """The NumPy view of ``work`` handed to the core (no copy)."""
        return self.work.numpy()


def _plain(tensor: torch.Tensor, on_device: bool) -> tuple[torch.Tensor, bool]:
    t = tensor.detach()
    shared = True
    if t.is_conj():
        t, shared = t.resolve_conj(), False
    if t.is_neg():
        t, shared = t.resolve_neg(), False
    if t.layout != torch.strided:
        raise ArgumentError(
            f"layout {t.layout} is not supported by this collective on rank-local tensors; "
            "use sparse_allreduce_async for sparse COO tensors or call .to_dense()"
        )
    if on_device:
        if not t.is_contiguous():
            t, shared = t.contiguous(), False
    elif t.device.type != "cpu":
        t, shared = t.to("cpu"), False
    return t, shared


def reduce_buffer(tensor: torch.Tensor, op_name: str, on_device: bool = False) -> HostBuffer:
    """Buffer for a reduction (allreduce, reducescatter) of ``tensor``: in host memory, or
    contiguous on the tensor's own device with ``on_device``."""
    t, shared = _plain(tensor, on_device)
    if t.dtype in CORE_DTYPES:
        return HostBuffer(tensor, t, shared, "same")
    if t.is_complex():
        if op_name.lower() not in ("sum", "average"):
            raise ArgumentError(
                f"op {op_name} is not defined for complex tensors ({t.dtype}); use Sum or Average"
            )
        return HostBuffer(tensor, torch.view_as_real(t), shared, "complex")
    if t.dtype in _REDUCE_WIDEN:
        return HostBuffer(tensor, t.to(_REDUCE_WIDEN[t.dtype]), False, "widen")
    raise ArgumentError(
        f"dtype {t.dtype} is not supported for reductions; supported: "
        f"{', '.join(sorted(str(d) for d in CORE_DTYPES | set(_REDUCE_WIDEN)))} and complex"
    )


def bytes_buffer(tensor: torch.Tensor, on_device: bool = False) -> HostBuffer:
    """Buffer for a data-moving collective: any dtype, exact (bytes when not a core dtype);
    in host memory, or contiguous on the tensor's own device with ``on_device``."""
    t, shared = _plain(tensor, on_device)
    if t.dtype in CORE_DTYPES:
        return HostBuffer(tensor, t, shared, "same")
    # [rows, cols] keeps the first dimension (the one allgather/alltoall split on) intact.
    rows = t.shape[0] if t.dim() else 1
    cols = math.prod(t.shape[1:]) if t.dim() else 1
    if not t.is_contiguous():
        t, shared = t.contiguous(), False
    return HostBuffer(tensor, t.reshape(rows, cols).view(torch.uint8), shared, "bytes")


def result_tensor(buf: HostBuffer, work_result: torch.Tensor, first_dim: int | None = None
                  ) -> torch.Tensor:
    """Map a result computed on ``buf.work``'s dtype back to the source's dtype and device.

    ``first_dim`` gives the result's first dimension for collectives that change it
    (allgather, alltoall, reducescatter); None keeps the source's shape.
    """
    src = buf.source
    if buf.kind == "complex":
        out = torch.view_as_complex(work_result.contiguous())
    elif buf.kind == "widen":
        out = work_result.to(src.dtype)
    elif buf.kind == "bytes":
        out = work_result.contiguous().view(src.dtype)
        shape = list(src.shape) if src.dim() else [1]
        if first_dim is not None:
            shape[0] = first_dim
        out = out.reshape(shape if src.dim() or first_dim is not None else [])
    else:
        out = work_result
    if out.device != src.device:
        out = out.to(src.device)
    return out
