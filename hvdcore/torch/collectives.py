"""Asynchronous torch collectives on the core engine (no autograd; see :mod:`.mpi_ops`).

Each function returns a :class:`~hvdcore.torch.handles.Handle`. Every call goes through the
engine; the data plane depends on the tensor (:mod:`hvdcore.torch.dataplanes`): CPU tensors go
as zero-copy NumPy views to MPI (results written into torch-owned memory through ``out=``) or,
with ``HVDCORE_CPU_OPERATIONS=gloo``, to torch.distributed Gloo; device tensors go to NCCL/RCCL
on the device when every rank can use it, else are staged through host memory.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import hvdcore as _core
from hvdcore import basics as _basics
from hvdcore.arguments import splits_vector
from hvdcore.errors import ArgumentError, UnsupportedError
from hvdcore.ops import allreduce as _core_allreduce
from hvdcore.ops import allreduce_async as _core_allreduce_async
from hvdcore.torch import dataplanes
from hvdcore.torch.backends import TorchBackend
from hvdcore.torch.handles import CoreResult, Handle, blocking
from hvdcore.torch.tensors import (
    CORE_DTYPES,
    HostBuffer,
    bytes_buffer,
    reduce_buffer,
    result_tensor,
)

__all__ = [
    "allreduce_impl", "allreduce_inplace_impl", "allreduce_async_impl",
    "grouped_allreduce_async_impl",
    "allgather_async_impl", "grouped_allgather_async_impl", "broadcast_async_impl",
    "alltoall_async_impl", "reducescatter_async_impl", "grouped_reducescatter_async_impl",
    "sparse_allreduce_async_impl", "check_tensor", "host_view", "plain_view",
    "inplace_host_array", "reduced_view", "started_view", "reduced_plain", "started_host",
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


def _plane_finisher(plane: TorchBackend, buf: HostBuffer, inplace: bool) -> Any:
    """Result of a data-plane call: the caller's stream waits for the plane first."""
    def finish(raw: torch.Tensor) -> torch.Tensor:
        res = plane.deliver(raw)
        if inplace:
            if res.data_ptr() != buf.work.data_ptr() or not buf.shared:
                with torch.no_grad():
                    buf.source.copy_(result_tensor(buf, res).reshape(buf.source.shape))
            return buf.source
        return result_tensor(buf, res)
    return finish


def _reduction(tensor: torch.Tensor, op: Any, inplace: bool, viewed: bool = False
               ) -> tuple[Any, Any, Any]:
    """(core input, core ``out=`` or None, finish(raw) -> result) for one reduced tensor
    (``viewed``: :func:`host_view` already gave None for it)."""
    if not inplace and not viewed:
        view = host_view(tensor)
        if view is not None:  # no staging: the NumPy view in, the result array out
            return view, None, _from_numpy
    plane = dataplanes.plane_for(tensor)
    if plane is None:
        buf = reduce_buffer(tensor, op.name)
        if not inplace:  # the core's pooled result memory, zero-copy (fresh pages cost more)
            return buf.array(), None, lambda raw: result_tensor(buf, _from_numpy(raw))
        out, aliased = _out_for(buf, inplace)
        return buf.array(), out.numpy(), _finisher(buf, out, aliased, inplace)
    buf = reduce_buffer(tensor, op.name, on_device=True)
    arr = dataplanes.wrap(plane, buf.work)
    return arr, (arr if inplace and buf.shared else None), _plane_finisher(plane, buf, inplace)


def _moving(tensor: torch.Tensor) -> tuple[Any, HostBuffer, TorchBackend | None]:
    """(core input, buffer, plane or None) for one tensor of a data-moving collective."""
    plane = dataplanes.plane_for(tensor)
    buf = bytes_buffer(tensor, on_device=plane is not None)
    return (buf.array() if plane is None else dataplanes.wrap(plane, buf.work)), buf, plane


def _moved(buf: HostBuffer, plane: TorchBackend | None, raw: Any) -> torch.Tensor:
    """A data-moving collective's result (``raw`` from the core) as the caller's tensor."""
    t = _from_numpy(raw) if plane is None else plane.deliver(raw)
    return result_tensor(buf, t, first_dim=raw.shape[0] if raw.ndim else 1)


def _planes() -> dataplanes.TorchPlanes:
    """:func:`dataplanes.current`, here: a cached call reads the engine's planes without a call
    into another file (tests/test_call_walk.py: no data-plane lookup on a cached call)."""
    st = _basics._state
    return (st.engine.bindings.get(dataplanes.KEY, dataplanes.NO_PLANES) if st is not None
            else dataplanes.NO_PLANES)


def host_view(tensor: torch.Tensor) -> np.ndarray | None:
    """The tensor's own NumPy view when the host MPI plane reduces it as it is (a CPU tensor
    of a core dtype, CPU tensors on MPI, a view ``numpy()`` gives: strided, no conjugate or
    negative bit; detached when it requires grad); else None (the tensor needs staging or
    another plane)."""
    arr = plain_view(tensor)
    if arr is not None or not tensor.requires_grad or _planes().cpu is not None:
        return arr
    try:
        arr = tensor.detach().numpy()
    except (RuntimeError, TypeError):
        return None
    return arr if arr.dtype in _CORE_NUMPY else None


def plain_view(tensor: torch.Tensor) -> np.ndarray | None:
    """:func:`host_view` of a tensor that does not require grad (None for one that does, so
    a view also means that no autograd is needed). It runs for every gradient of every step:
    ``numpy()`` alone checks the device, layout, bits and grad (each torch attribute read
    costs 1-3 us right after an MPI call)."""
    if _planes().cpu is not None:
        return None
    try:
        arr = tensor.numpy()
    except (RuntimeError, TypeError):  # another device or layout, a conjugate or negative
        return None                    # bit, a dtype NumPy lacks, or it requires grad
    return arr if arr.dtype in _CORE_NUMPY else None


_CORE_NUMPY = frozenset(torch.empty(0, dtype=d).numpy().dtype for d in CORE_DTYPES)


def allreduce_inplace_impl(tensor: torch.Tensor, op: Any, name: str | None,
                           prescale_factor: float, postscale_factor: float,
                           process_set: Any) -> torch.Tensor:
    """Blocking in-place allreduce: a host tensor on MPI, and a tensor a data plane reduces
    in its own memory (Gloo, NCCL), take the core's blocking call (and its cached paths); the
    others (staged tensors) wait on :func:`allreduce_async_impl`.

    A named plane tensor keeps its core buffer (``TorchPlanes.inplace_buffers``) while it is
    the same tensor with the same memory, dtype and shape: the next call reuses it, and the
    core then reuses its checked request too (one check per call, none repeated per step)."""
    check_tensor(tensor, "allreduce")
    arr = inplace_host_array(tensor)
    if arr is not None:
        _core_allreduce(arr, None, name, op, prescale_factor, postscale_factor, process_set,
                        arr)
        return tensor
    got = _plane_input(tensor, op, name)
    if got is None:
        return blocking(lambda: allreduce_async_impl(tensor, op, name, prescale_factor,
                                                     postscale_factor, process_set, True))
    plane, buf = got
    _core_allreduce(buf, None, name, op, prescale_factor, postscale_factor, process_set, buf)
    if plane.stream is not None:  # and the caller's for the plane's work (deliver)
        plane.deliver(tensor)
    return tensor


_PLANE_NAMES = 4096  # names whose plane buffer is remembered


def _plane_input(tensor: torch.Tensor, op: Any, name: str | None) -> tuple[Any, Any] | None:
    """(plane, core buffer) of a tensor a data plane reduces in its own memory (Gloo, NCCL:
    contiguous, a core dtype), made ready for the plane's stream; None when it needs staging
    or no plane takes it. A named tensor keeps its buffer (``TorchPlanes.inplace_buffers``)
    while it is the same tensor with the same memory, dtype and shape: the next call reuses
    it, and the core then reuses its checked request too (one check per call)."""
    buffers = _planes().inplace_buffers
    last = buffers.get(name) if type(name) is str else None
    if (last is not None and last[0]() is tensor and tensor.dtype is last[1]
            and tensor.data_ptr() == last[2] and tensor.shape == last[3]
            and tensor.is_contiguous()):
        plane, buf = last[4], last[5]
        if plane.stream is not None:  # the plane's stream waits for the caller's (as wrap)
            plane.prepare(buf.tensor)
        return plane, buf
    plane = dataplanes.plane_for(tensor)
    if plane is None:
        return None
    staged = reduce_buffer(tensor, op.name, on_device=True)
    if not staged.shared or staged.kind != "same":
        return None
    buf = dataplanes.wrap(plane, staged.work)  # (prepares the plane's stream)
    if type(name) is str:
        if len(buffers) >= _PLANE_NAMES:
            buffers.clear()
        buffers[name] = (weakref.ref(tensor), tensor.dtype, buf.ptr, tensor.shape, plane, buf)
    return plane, buf


def allreduce_async_impl(tensor: torch.Tensor, op: Any, name: str | None,
                         prescale_factor: float, postscale_factor: float, process_set: Any,
                         inplace: bool) -> Handle:
    """Start an allreduce of ``tensor``; in-place when ``inplace``."""
    check_tensor(tensor, "allreduce")
    arr = inplace_host_array(tensor) if inplace else host_view(tensor)
    if arr is not None:
        if not inplace:
            return started_view(arr, op, name, prescale_factor, postscale_factor, process_set)
        # A contiguous CPU tensor reduced in place: the engine reads and writes the tensor's
        # own memory, with nothing to map back.
        h = _core_allreduce_async(arr, None, name, op, prescale_factor, postscale_factor,
                                  process_set, arr)
        return CoreResult(h, lambda _raw: tensor, f"allreduce {name or ''}")
    arr, out, finish = _reduction(tensor, op, inplace, viewed=True)
    h = _core.allreduce_async(arr, name=name, op=op, prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor, process_set=process_set,
                              out=out)
    return Handle(h, finish, f"allreduce {name or ''}")


def started_view(arr: np.ndarray, op: Any, name: str | None, prescale_factor: float,
                 postscale_factor: float, process_set: Any) -> CoreResult:
    """The handle of an allreduce of ``arr`` (a :func:`host_view`) returning a new tensor:
    the view in, the core's result array out, zero-copy."""
    h = _core_allreduce_async(arr, None, name, op, prescale_factor, postscale_factor,
                              process_set)
    return CoreResult(h, torch.from_numpy, f"allreduce {name or ''}")


def inplace_host_array(tensor: torch.Tensor) -> np.ndarray | None:
    """The NumPy view the engine reduces in place for ``tensor`` (a contiguous :func:`host_view`:
    the DistributedOptimizer's gradients), or None when the tensor needs staging."""
    arr = host_view(tensor)
    return arr if arr is not None and arr.flags.c_contiguous else None


def allreduce_impl(tensor: torch.Tensor, op: Any, name: str | None, prescale_factor: float,
                   postscale_factor: float, process_set: Any) -> torch.Tensor:
    """Blocking allreduce returning a new tensor: host tensors on MPI, and tensors a data
    plane reduces in their own memory (:func:`_plane_input`), take the core's blocking call
    (and its cached paths); the others (staged tensors) wait on :func:`allreduce_async_impl`."""
    check_tensor(tensor, "allreduce")
    arr = host_view(tensor)
    if arr is not None:
        return reduced_view(arr, op, name, prescale_factor, postscale_factor, process_set)
    if not tensor.is_cpu or dataplanes.plane_for(tensor) is not None:
        out = _reduced_on_plane(tensor, op, name, prescale_factor, postscale_factor,
                                process_set)
        if out is None:  # staged: the asynchronous call's buffers and finish
            return blocking(lambda: allreduce_async_impl(tensor, op, name, prescale_factor,
                                                         postscale_factor, process_set, False))
        return out
    buf = reduce_buffer(tensor, op.name)
    raw = _core.allreduce(buf.array(), name=name, op=op, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, process_set=process_set)
    return result_tensor(buf, _from_numpy(raw))


def reduced_view(arr: np.ndarray, op: Any, name: str | None, prescale_factor: float,
                 postscale_factor: float, process_set: Any) -> torch.Tensor:
    """A new tensor holding the blocking allreduce of ``arr`` (a :func:`host_view`): the
    view in, the core's result array out, zero-copy (what reduce_buffer and result_tensor
    would do for it, without their bookkeeping)."""
    return torch.from_numpy(_core_allreduce(arr, None, name, op, prescale_factor,
                                            postscale_factor, process_set))


def reduced_plain(tensor: torch.Tensor, op: Any, name: str | None, prescale_factor: float,
                  postscale_factor: float, process_set: Any) -> torch.Tensor | None:
    """The blocking ``allreduce`` of a tensor with nothing to differentiate that needs no
    staging, one call from the binding (``op`` already resolved): a host tensor on MPI (its
    :func:`plain_view` in, the core's result array out, zero-copy) or a tensor its data plane
    reduces in its own memory (:func:`_plane_input`: the plane's new result out). None,
    nothing done, for any other tensor."""
    arr = plain_view(tensor)
    if arr is not None:
        return torch.from_numpy(_core_allreduce(arr, None, name, op, prescale_factor,
                                                postscale_factor, process_set))
    if (tensor.is_cpu and _planes().cpu is None) or tensor.requires_grad:
        return None  # (a host tensor that needs staging, or autograd)
    return _reduced_on_plane(tensor, op, name, prescale_factor, postscale_factor, process_set)


def _reduced_on_plane(tensor: torch.Tensor, op: Any, name: str | None, prescale_factor: float,
                      postscale_factor: float, process_set: Any) -> torch.Tensor | None:
    """The core's blocking call for a tensor its plane reduces in its own memory
    (:func:`_plane_input`): the plane's new result, delivered to the caller's stream; None,
    nothing done, when the tensor needs staging."""
    got = _plane_input(tensor, op, name)
    if got is None:
        return None
    plane, buf = got
    out: Any = _core_allreduce(buf, None, name, op, prescale_factor, postscale_factor,
                               process_set)
    return out if plane.stream is None else plane.deliver(out)


def started_host(tensor: torch.Tensor, op: Any, name: str | None, prescale_factor: float,
                 postscale_factor: float, process_set: Any) -> CoreResult | None:
    """:func:`started_view` of ``tensor``'s :func:`plain_view`, or None (nothing done) when
    it has none: ``allreduce_async``'s path for a host tensor on MPI."""
    arr = plain_view(tensor)
    if arr is None:
        return None
    h = _core_allreduce_async(arr, None, name, op, prescale_factor, postscale_factor,
                              process_set)
    return CoreResult(h, torch.from_numpy, f"allreduce {name or ''}")


def grouped_allreduce_async_impl(tensors: Sequence[torch.Tensor], op: Any, name: str | None,
                                 prescale_factor: float, postscale_factor: float,
                                 process_set: Any, inplace: bool) -> Handle:
    """Start one grouped allreduce of ``tensors`` (reduced together, as one negotiation unit)."""
    tensors = [check_tensor(t, "grouped_allreduce") for t in tensors]
    staged = [_reduction(t, op, inplace) for t in tensors]
    h = _core.grouped_allreduce_async(
        [a for a, _, _ in staged], name=name, op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, process_set=process_set,
        out=[o for _, o, _ in staged])
    return Handle(h, lambda raw: [f(r) for (_, _, f), r in zip(staged, raw, strict=True)],
                  f"grouped_allreduce {name or ''}")


def allgather_async_impl(tensor: torch.Tensor, name: str | None, process_set: Any) -> Handle:
    """Start an allgather (concatenation on dim 0; first dimensions may differ by rank)."""
    check_tensor(tensor, "allgather")
    arr, buf, plane = _moving(tensor)
    h = _core.allgather_async(arr, name=name, process_set=process_set)
    return Handle(h, lambda raw: _moved(buf, plane, raw), f"allgather {name or ''}")


def grouped_allgather_async_impl(tensors: Sequence[torch.Tensor], name: str | None,
                                 process_set: Any) -> Handle:
    """Start one grouped allgather of ``tensors``."""
    tensors = [check_tensor(t, "grouped_allgather") for t in tensors]
    staged = [_moving(t) for t in tensors]
    h = _core.grouped_allgather_async([a for a, _, _ in staged], name=name,
                                      process_set=process_set)

    def finish(raw: list[Any]) -> list[torch.Tensor]:
        return [_moved(b, p, r) for (_, b, p), r in zip(staged, raw, strict=True)]
    return Handle(h, finish, f"grouped_allgather {name or ''}")


def broadcast_async_impl(tensor: torch.Tensor, root_rank: int, name: str | None,
                         process_set: Any, inplace: bool) -> Handle:
    """Start a broadcast from ``root_rank``; in-place when ``inplace``."""
    check_tensor(tensor, "broadcast")
    plane = dataplanes.plane_for(tensor)
    arr: Any  # a host array, or the plane's DeviceBuffer (the core takes either)
    out_arg: Any
    if plane is None:
        buf = bytes_buffer(tensor)
        out, aliased = _out_for(buf, inplace)
        arr, out_arg, finish = buf.array(), out.numpy(), _finisher(buf, out, aliased, inplace)
    else:
        buf = bytes_buffer(tensor, on_device=True)
        arr = dataplanes.wrap(plane, buf.work)
        out_arg = arr if inplace and buf.shared else None
        finish = _plane_finisher(plane, buf, inplace)
    h = _core.broadcast_async(arr, root_rank, name=name, process_set=process_set, out=out_arg)
    return Handle(h, finish, f"broadcast {name or ''}")


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
    arr, buf, plane = _moving(tensor)
    h = _core.alltoall_async(arr, splits=split_arr, name=name, process_set=process_set)

    def finish(raw: tuple[Any, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        out, received = raw
        return (_moved(buf, plane, out),
                torch.from_numpy(np.asarray(received, dtype=np.int32).copy()))
    return Handle(h, finish, f"alltoall {name or ''}")


def reducescatter_async_impl(tensor: torch.Tensor, op: Any, name: str | None, process_set: Any,
                             prescale_factor: float, postscale_factor: float) -> Handle:
    """Start a reducescatter: reduce, then rank i keeps the i-th block of dim 0."""
    check_tensor(tensor, "reducescatter")
    return _reducescatter([tensor], op, name, process_set, prescale_factor, postscale_factor,
                          grouped=False)


def grouped_reducescatter_async_impl(tensors: Sequence[torch.Tensor], op: Any, name: str | None,
                                     process_set: Any, prescale_factor: float,
                                     postscale_factor: float) -> Handle:
    """Start one grouped reducescatter of ``tensors``."""
    tensors = [check_tensor(t, "grouped_reducescatter") for t in tensors]
    return _reducescatter(tensors, op, name, process_set, prescale_factor, postscale_factor,
                          grouped=True)


def _reducescatter(tensors: list[torch.Tensor], op: Any, name: str | None, process_set: Any,
                   prescale_factor: float, postscale_factor: float, grouped: bool) -> Handle:
    staged: list[tuple[Any, Any, Any]] = []  # (host array or plane DeviceBuffer, buffer, plane)
    for t in tensors:
        plane = dataplanes.plane_for(t)
        buf = reduce_buffer(t, op.name, on_device=plane is not None)
        staged.append((buf.array() if plane is None else dataplanes.wrap(plane, buf.work),
                       buf, plane))
    kw = dict(name=name, op=op, process_set=process_set, prescale_factor=prescale_factor,
              postscale_factor=postscale_factor)
    if grouped:
        h = _core.grouped_reducescatter_async([a for a, _, _ in staged], **kw)
    else:
        h = _core.reducescatter_async(staged[0][0], **kw)

    def finish(raw: Any) -> Any:
        outs = [_moved(b, p, r) for (_, b, p), r in
                zip(staged, raw if grouped else [raw], strict=True)]
        return outs if grouped else outs[0]
    label = "grouped_reducescatter" if grouped else "reducescatter"
    return Handle(h, finish, f"{label} {name or ''}")


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
