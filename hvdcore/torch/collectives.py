"""Asynchronous torch collectives on the core engine (no autograd; see :mod:`.mpi_ops`).

Each function returns a :class:`~hvdcore.torch.handles.Handle`. CPU tensors go to the engine as
zero-copy NumPy views and results are written into torch-owned memory through ``out=``; device
tensors take the NCCL path when :mod:`hvdcore.torch.gpu` has one, else are staged through host
memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import hvdcore as _core
from hvdcore.arguments import splits_vector
from hvdcore.errors import ArgumentError, UnsupportedError
from hvdcore.torch import gpu
from hvdcore.torch.handles import Handle
from hvdcore.torch.tensors import (
    CORE_DTYPES,
    HostBuffer,
    bytes_buffer,
    reduce_buffer,
    result_tensor,
)

__all__ = [
    "allreduce_async_impl", "grouped_allreduce_async_impl",
    "allgather_async_impl", "grouped_allgather_async_impl", "broadcast_async_impl",
    "alltoall_async_impl", "reducescatter_async_impl", "grouped_reducescatter_async_impl",
    "sparse_allreduce_async_impl", "check_tensor",
]


def check_tensor(tensor: Any, what: str) -> torch.Tensor:
    """``tensor`` if it is a torch.Tensor, else UnsupportedError (a TypeError)."""
    if not isinstance(tensor, torch.Tensor):
        raise UnsupportedError(f"{what} expects a torch.Tensor, got {type(tensor).__name__}")
    return tensor


def _from_numpy(arr: np.ndarray) -> torch.Tensor:
    if not arr.flags.writeable:
        arr = arr.copy()
    return torch.from_numpy(arr)


def _out_for(buf: HostBuffer, inplace: bool) -> tuple[torch.Tensor, bool]:
    """Where the core writes the result: the input's own memory when in-place allows it."""
    if inplace and buf.shared and buf.work.is_contiguous():
        return buf.work, True
    return torch.empty(buf.work.shape, dtype=buf.work.dtype), False


def _finisher(buf: HostBuffer, out: torch.Tensor, aliased: bool, inplace: bool) -> Any:
    def finish(_raw: Any) -> torch.Tensor:
        if inplace:
            if not aliased:
                with torch.no_grad():
                    buf.source.copy_(result_tensor(buf, out).reshape(buf.source.shape))
            return buf.source
        return result_tensor(buf, out)
    return finish


def allreduce_async_impl(tensor: torch.Tensor, op: Any, name: str | None,
                         prescale_factor: float, postscale_factor: float, process_set: Any,
                         inplace: bool) -> Handle:
    """Start an allreduce of ``tensor``; in-place when ``inplace``."""
    check_tensor(tensor, "allreduce")
    if (inplace and tensor.dtype in CORE_DTYPES and tensor.device.type == "cpu"
            and tensor.layout == torch.strided and tensor.is_contiguous()):
        # The DistributedOptimizer's case (a contiguous CPU gradient reduced in place): the
        # engine reads and writes the tensor's own memory, with nothing to map back.
        arr = tensor.detach().numpy()
        h = _core.allreduce_async(arr, name=name, op=op, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set=process_set,
                                  out=arr)
        return Handle(h, lambda _raw: tensor, f"allreduce {name or ''}")
    if gpu.routes(tensor, process_set, op):
        return gpu.allreduce_async(tensor, op, prescale_factor, postscale_factor, process_set,
                                   inplace)
    buf = reduce_buffer(tensor, op.name)
    out, aliased = _out_for(buf, inplace)
    h = _core.allreduce_async(buf.array(), name=name, op=op, prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor, process_set=process_set,
                              out=out.numpy())
    return Handle(h, _finisher(buf, out, aliased, inplace), f"allreduce {name or ''}")


def grouped_allreduce_async_impl(tensors: Sequence[torch.Tensor], op: Any, name: str | None,
                                 prescale_factor: float, postscale_factor: float,
                                 process_set: Any, inplace: bool) -> Handle:
    """Start one grouped allreduce of ``tensors`` (reduced together, as one negotiation unit)."""
    tensors = [check_tensor(t, "grouped_allreduce") for t in tensors]
    if tensors and all(gpu.routes(t, process_set, op) for t in tensors):
        hs = [gpu.allreduce_async(t, op, prescale_factor, postscale_factor, process_set, inplace)
              for t in tensors]
        return Handle(hs, lambda raw: raw, "grouped_allreduce (nccl)")
    bufs = [reduce_buffer(t, op.name) for t in tensors]
    outs = [_out_for(b, inplace) for b in bufs]
    h = _core.grouped_allreduce_async(
        [b.array() for b in bufs], name=name, op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, process_set=process_set,
        out=[o.numpy() for o, _ in outs])
    finishers = [_finisher(b, o, a, inplace) for b, (o, a) in zip(bufs, outs, strict=True)]
    return Handle(h, lambda raw: [f(None) for f in finishers], f"grouped_allreduce {name or ''}")


def allgather_async_impl(tensor: torch.Tensor, name: str | None, process_set: Any) -> Handle:
    """Start an allgather (concatenation on dim 0; first dimensions may differ by rank)."""
    check_tensor(tensor, "allgather")
    if gpu.routes(tensor, process_set):
        return gpu.allgather_async(tensor, process_set)
    buf = bytes_buffer(tensor)
    h = _core.allgather_async(buf.array(), name=name, process_set=process_set)

    def finish(raw: np.ndarray) -> torch.Tensor:
        return result_tensor(buf, _from_numpy(raw), first_dim=raw.shape[0] if raw.ndim else 1)
    return Handle(h, finish, f"allgather {name or ''}")


def grouped_allgather_async_impl(tensors: Sequence[torch.Tensor], name: str | None,
                                 process_set: Any) -> Handle:
    """Start one grouped allgather of ``tensors``."""
    tensors = [check_tensor(t, "grouped_allgather") for t in tensors]
    if tensors and all(gpu.routes(t, process_set) for t in tensors):
        hs = [gpu.allgather_async(t, process_set) for t in tensors]
        return Handle(hs, lambda raw: raw, "grouped_allgather (nccl)")
    bufs = [bytes_buffer(t) for t in tensors]
    h = _core.grouped_allgather_async([b.array() for b in bufs], name=name,
                                      process_set=process_set)

    def finish(raw: list[np.ndarray]) -> list[torch.Tensor]:
        return [result_tensor(b, _from_numpy(r), first_dim=r.shape[0] if r.ndim else 1)
                for b, r in zip(bufs, raw, strict=True)]
    return Handle(h, finish, f"grouped_allgather {name or ''}")


def broadcast_async_impl(tensor: torch.Tensor, root_rank: int, name: str | None,
                         process_set: Any, inplace: bool) -> Handle:
    """Start a broadcast from ``root_rank``; in-place when ``inplace``."""
    check_tensor(tensor, "broadcast")
    if gpu.routes(tensor, process_set):
        return gpu.broadcast_async(tensor, root_rank, process_set, inplace)
    buf = bytes_buffer(tensor)
    out, aliased = _out_for(buf, inplace)
    h = _core.broadcast_async(buf.array(), root_rank, name=name, process_set=process_set,
                              out=out.numpy())
    return Handle(h, _finisher(buf, out, aliased, inplace), f"broadcast {name or ''}")


def _splits_array(splits: Any) -> np.ndarray | None:
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        splits = splits.detach().cpu().numpy()
    return splits_vector(splits)


def alltoall_async_impl(tensor: torch.Tensor, splits: Any, name: str | None,
                        process_set: Any) -> Handle:
    """Start an alltoall; the result is ``(output, received_splits)``."""
    check_tensor(tensor, "alltoall")
    split_arr = _splits_array(splits)
    if gpu.routes(tensor, process_set):
        return gpu.alltoall_async(tensor, split_arr, process_set)
    buf = bytes_buffer(tensor)
    h = _core.alltoall_async(buf.array(), splits=split_arr, name=name, process_set=process_set)

    def finish(raw: tuple[np.ndarray, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        out, received = raw
        return (result_tensor(buf, _from_numpy(out), first_dim=out.shape[0]),
                torch.from_numpy(np.asarray(received, dtype=np.int32).copy()))
    return Handle(h, finish, f"alltoall {name or ''}")


def reducescatter_async_impl(tensor: torch.Tensor, op: Any, name: str | None, process_set: Any,
                             prescale_factor: float, postscale_factor: float) -> Handle:
    """Start a reducescatter: reduce, then rank i keeps the i-th block of dim 0."""
    check_tensor(tensor, "reducescatter")
    if gpu.routes(tensor, process_set, op):
        return gpu.reducescatter_async(tensor, op, process_set, prescale_factor,
                                       postscale_factor)
    buf = reduce_buffer(tensor, op.name)
    h = _core.reducescatter_async(buf.array(), name=name, op=op, process_set=process_set,
                                  prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor)

    def finish(raw: np.ndarray) -> torch.Tensor:
        return result_tensor(buf, _from_numpy(raw), first_dim=raw.shape[0])
    return Handle(h, finish, f"reducescatter {name or ''}")


def grouped_reducescatter_async_impl(tensors: Sequence[torch.Tensor], op: Any, name: str | None,
                                     process_set: Any, prescale_factor: float,
                                     postscale_factor: float) -> Handle:
    """Start one grouped reducescatter of ``tensors``."""
    tensors = [check_tensor(t, "grouped_reducescatter") for t in tensors]
    if tensors and all(gpu.routes(t, process_set, op) for t in tensors):
        hs = [gpu.reducescatter_async(t, op, process_set, prescale_factor, postscale_factor)
              for t in tensors]
        return Handle(hs, lambda raw: raw, "grouped_reducescatter (nccl)")
    bufs = [reduce_buffer(t, op.name) for t in tensors]
    h = _core.grouped_reducescatter_async(
        [b.array() for b in bufs], name=name, op=op, process_set=process_set,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor)

    def finish(raw: list[np.ndarray]) -> list[torch.Tensor]:
        return [result_tensor(b, _from_numpy(r), first_dim=r.shape[0])
                for b, r in zip(bufs, raw, strict=True)]
    return Handle(h, finish, f"grouped_reducescatter {name or ''}")


def sparse_allreduce_async_impl(tensor: torch.Tensor, name: str, op: Any,
                                process_set: Any) -> Handle:
    """Start an allreduce of a sparse COO tensor: allgather of indices and values, then sum.

    The result is a coalesced sparse tensor (divided by the set size for Average).
    """
    check_tensor(tensor, "sparse_allreduce_async")
    if not tensor.is_sparse:
        raise ArgumentError("sparse_allreduce_async expects a sparse COO tensor "
                            f"(layout torch.sparse_coo), got layout {tensor.layout}")
    if op not in (_core.Average, _core.Sum):
        raise ArgumentError("sparse_allreduce_async supports Sum and Average, not "
                            f"{op.name.capitalize()}")
    sp = tensor.detach().coalesce()
    indices = sp.indices().t().contiguous()  # [nnz, sparse_dim]: gathered along nnz
    values = sp.values().contiguous()
    h_idx = allgather_async_impl(indices, f"{name}.indices" if name else None, process_set)
    h_val = allgather_async_impl(values, f"{name}.values" if name else None, process_set)
    n = process_set.size()

    def finish(raw: list[torch.Tensor]) -> torch.Tensor:
        idx, val = raw
        if op == _core.Average:
            val = val / n if val.is_floating_point() else torch.div(val, n,
                                                                     rounding_mode="floor")
        out = torch.sparse_coo_tensor(idx.t(), val, size=sp.shape, device=tensor.device,
                                      check_invariants=True)
        return out.coalesce()
    return Handle([h_idx, h_val], finish, f"sparse_allreduce {name or ''}")
