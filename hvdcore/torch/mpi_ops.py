"""Horovod's collective operations on torch tensors (``hvd.allreduce`` and friends).

Results keep the input's dtype, device and shape (first dimension aside for allgather,
alltoall and reducescatter). Blocking versions are differentiable (see
:mod:`hvdcore.torch.autograd`); ``*_async`` versions return a handle for :func:`poll` /
:func:`synchronize`; trailing-underscore versions work in place. ``name`` identifies the
operation across ranks (when None, ranks must call collectives in the same order). A call
whose arguments fail a check on one rank fails on every rank, naming that rank (see
:func:`hvdcore.collectives.rejecting`).

Gradients follow Horovod 0.28.1's definitions; the differentiable collectives also take
``gradient="exact"`` for the exact derivative of the sum of every rank's loss (see
:mod:`hvdcore.torch.autograd`).

Example::

    >>> import torch, hvdcore.torch as hvd
    >>> hvd.init()
    >>> hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum)   # doctest: +SKIP
    tensor([1.])   # with 2 ranks
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import hvdcore as _core
from hvdcore.arguments import resolve_op
from hvdcore.collectives import rejecting
from hvdcore.docstrings import documented
from hvdcore.engine.messages import (
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BROADCAST,
    REDUCESCATTER,
    ReduceOp,
)
from hvdcore.errors import UnsupportedError
from hvdcore.torch import collectives as C
from hvdcore.torch.autograd import (
    AllgatherFn,
    AllreduceFn,
    AlltoallFn,
    BroadcastFn,
    GroupedAllreduceFn,
    ReducescatterFn,
    gradient_mode,
)
from hvdcore.torch.compression import Compression, Compressor
from hvdcore.torch.handles import Handle, blocking

__all__ = [
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_",
    "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_async", "broadcast_", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "barrier", "join",
]

_GLOBAL = _core.global_process_set
_NO_COMPRESSION = Compression.none
_AVERAGE = ReduceOp.AVERAGE


def _tensor_list(tensors: Any, what: str) -> list[torch.Tensor]:
    """``tensors`` as a list, each a torch.Tensor (UnsupportedError, a TypeError, if not)."""
    if not isinstance(tensors, (list, tuple)):
        raise UnsupportedError(f"{what} expects a list of tensors, got {type(tensors).__name__}")
    for t in tensors:
        C.check_tensor(t, what)
    return list(tensors)


@rejecting(ALLREDUCE)
@documented("allreduce", returns="A new tensor with the reduction, differentiable.")
def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: Any = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: Any = _GLOBAL, *, gradient: str = "horovod") -> torch.Tensor:
    """Reduce ``tensor`` over all ranks of ``process_set`` (default op Average); differentiable.

    Example::

        >>> avg = hvd.allreduce(torch.ones(2) * hvd.rank())   # doctest: +SKIP
    """
    if op is None and average is None:  # Horovod's default, without a call
        op = _AVERAGE
    elif average is not None or type(op) is not ReduceOp:
        op = resolve_op(average, op)
    exact = gradient != "horovod" and gradient_mode(gradient)
    plain = compression is _NO_COMPRESSION
    if plain and isinstance(tensor, torch.Tensor):
        # nothing to differentiate, no staging (a host tensor on MPI, a plane's tensor in its
        # own memory): the core's call (None otherwise)
        out = C.reduced_plain(tensor, op, name, prescale_factor, postscale_factor, process_set)
        if out is not None:
            return out
    compressed, ctx = (tensor, None) if plain else compression.compress(tensor)
    if getattr(compressed, "requires_grad", False) and torch.is_grad_enabled():
        out = AllreduceFn.apply(compressed, op, name, prescale_factor, postscale_factor,
                                process_set, exact)
    else:  # nothing to differentiate: autograd's bookkeeping would only cost time
        out = C.allreduce_impl(compressed, op, name, prescale_factor, postscale_factor,
                               process_set)
    return out if plain else compression.decompress(out, ctx)


@rejecting(ALLREDUCE)
@documented("allreduce",
            returns=("A handle: ``hvd.synchronize(handle)`` returns a new tensor with the "
                     "reduction."))
def allreduce_async(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                    op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    process_set: Any = _GLOBAL) -> Handle:
    """Start an allreduce; ``synchronize(handle)`` returns a new tensor with the result."""
    if op is None and average is None:
        op = _AVERAGE
    elif average is not None or type(op) is not ReduceOp:
        op = resolve_op(average, op)
    if isinstance(tensor, torch.Tensor):
        # a host tensor on MPI, as allreduce's fast path (None otherwise)
        h = C.started_host(tensor, op, name, prescale_factor, postscale_factor, process_set)
        if h is not None:
            return h
    return C.allreduce_async_impl(tensor, op, name, prescale_factor, postscale_factor,
                                  process_set, inplace=False)


@rejecting(ALLREDUCE)
@documented("allreduce", returns="``tensor``, now holding the reduction.")
def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: Any = _GLOBAL) -> torch.Tensor:
    """Allreduce in place: ``tensor`` receives the result and is returned."""
    if op is None and average is None:
        op = _AVERAGE
    elif average is not None or type(op) is not ReduceOp:
        op = resolve_op(average, op)
    return C.allreduce_inplace_impl(tensor, op, name, prescale_factor, postscale_factor,
                                    process_set)


@rejecting(ALLREDUCE)
@documented("allreduce",
            returns=("A handle: ``hvd.synchronize(handle)`` returns ``tensor``, now holding the "
                     "reduction."))
def allreduce_async_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
                     op: Any = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0, process_set: Any = _GLOBAL) -> Handle:
    """Start an in-place allreduce; ``synchronize(handle)`` returns ``tensor``."""
    if op is None and average is None:
        op = _AVERAGE
    elif average is not None or type(op) is not ReduceOp:
        op = resolve_op(average, op)
    return C.allreduce_async_impl(tensor, op, name, prescale_factor, postscale_factor,
                                  process_set, inplace=True)


@rejecting(ALLREDUCE, grouped=True)
@documented("allreduce",
            returns="New tensors with the reductions, in the order of ``tensors``; differentiable.")
def grouped_allreduce(tensors: Sequence[torch.Tensor], average: bool | None = None,
                      name: str | None = None, compression: type[Compressor] = Compression.none,
                      op: Any = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0, process_set: Any = _GLOBAL, *,
                      gradient: str = "horovod") -> list[torch.Tensor]:
    """Allreduce a list of tensors as one unit (one negotiation, fused); differentiable."""
    op = resolve_op(average, op, "grouped_allreduce")
    exact = gradient_mode(gradient)
    pairs = [compression.compress(t) for t in _tensor_list(tensors, 'grouped collective')]
    if (exact and op in (_core.Min, _core.Max, _core.Product)
            and any(t.requires_grad for t, _ in pairs)):
        outs = [AllreduceFn.apply(t, op, None if name is None else f"{name}.{i}",
                                  prescale_factor, postscale_factor, process_set, True)
                for i, (t, _) in enumerate(pairs)]
    else:
        outs = list(GroupedAllreduceFn.apply(op, name, prescale_factor, postscale_factor,
                                             process_set, *[t for t, _ in pairs]))
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs, strict=True)]


@rejecting(ALLREDUCE, grouped=True)
@documented("allreduce",
            returns="A handle: ``hvd.synchronize(handle)`` returns the list of new tensors.")
def grouped_allreduce_async(tensors: Sequence[torch.Tensor], average: bool | None = None,
                            name: str | None = None, op: Any = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: Any = _GLOBAL) -> Handle:
    """Start a grouped allreduce; ``synchronize`` returns a list of new tensors."""
    op = resolve_op(average, op, "grouped_allreduce")
    return C.grouped_allreduce_async_impl(tensors, op, name, prescale_factor, postscale_factor,
                                          process_set, False)


@rejecting(ALLREDUCE, grouped=True)
@documented("allreduce", returns="``tensors``, now holding the reductions.")
def grouped_allreduce_(tensors: Sequence[torch.Tensor], average: bool | None = None,
                       name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                       postscale_factor: float = 1.0,
                       process_set: Any = _GLOBAL) -> list[torch.Tensor]:
    """Grouped allreduce in place; returns the input tensors holding the results."""
    return blocking(lambda: grouped_allreduce_async_(tensors, average, name, op,
                                                     prescale_factor, postscale_factor,
                                                     process_set))


@rejecting(ALLREDUCE, grouped=True)
@documented("allreduce",
            returns=("A handle: ``hvd.synchronize(handle)`` returns ``tensors``, now holding the"
                     " reductions."))
def grouped_allreduce_async_(tensors: Sequence[torch.Tensor], average: bool | None = None,
                             name: str | None = None, op: Any = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: Any = _GLOBAL) -> Handle:
    """Start an in-place grouped allreduce."""
    op = resolve_op(average, op, "grouped_allreduce")
    return C.grouped_allreduce_async_impl(tensors, op, name, prescale_factor, postscale_factor,
                                          process_set, True)


@documented(returns="A callable handle: ``handle()`` or ``hvd.synchronize(handle)`` returns the "
                    "coalesced sparse sum or average.",
            tensor="A sparse COO tensor: the same dense shape and dtype on every rank.",
            op="``Average`` or ``Sum``.")
def sparse_allreduce_async(tensor: torch.Tensor, name: str | None, op: Any,
                           process_set: Any = _GLOBAL) -> Handle:
    """Start an allreduce of a sparse COO tensor (allgather of indices and values).

    The handle is callable, as Horovod's: ``handle()`` (or ``synchronize(handle)``) returns a
    coalesced sparse tensor.
    """
    op = resolve_op(None, op, "sparse_allreduce_async")
    return C.sparse_allreduce_async_impl(tensor, name or "", op, process_set)


@rejecting(ALLGATHER)
@documented("allgather",
            returns=("A new tensor: every rank's ``tensor`` concatenated along the first "
                     "dimension, in rank order; differentiable."))
def allgather(tensor: torch.Tensor, name: str | None = None, process_set: Any = _GLOBAL, *,
              gradient: str = "horovod") -> torch.Tensor:
    """Concatenate every rank's ``tensor`` on dim 0 (sizes may differ); differentiable.

    The gradient is the average over ranks of the output gradient (Horovod), or their sum with
    ``gradient="exact"``.
    """
    return AllgatherFn.apply(tensor, name, process_set, gradient_mode(gradient))


@rejecting(ALLGATHER)
@documented("allgather",
            returns="A handle: ``hvd.synchronize(handle)`` returns the gathered tensor.")
def allgather_async(tensor: torch.Tensor, name: str | None = None,
                    process_set: Any = _GLOBAL) -> Handle:
    """Start an allgather."""
    return C.allgather_async_impl(tensor, name, process_set)


@rejecting(ALLGATHER, grouped=True)
@documented("allgather", returns="One gathered tensor per input, in the order of ``tensors``.")
def grouped_allgather(tensors: Sequence[torch.Tensor], name: str | None = None,
                      process_set: Any = _GLOBAL, *,
                      gradient: str = "horovod") -> list[torch.Tensor]:
    """Allgather a list of tensors as one unit; differentiable (as :func:`allgather`)."""
    tensors = _tensor_list(tensors, "grouped_allgather")
    exact = gradient_mode(gradient)
    if any(t.requires_grad for t in tensors):
        return [AllgatherFn.apply(t, None if name is None else f"{name}.{i}", process_set, exact)
                for i, t in enumerate(tensors)]
    return blocking(lambda: C.grouped_allgather_async_impl(tensors, name, process_set))


@rejecting(ALLGATHER, grouped=True)
@documented("allgather",
            returns="A handle: ``hvd.synchronize(handle)`` returns the list of gathered tensors.")
def grouped_allgather_async(tensors: Sequence[torch.Tensor], name: str | None = None,
                            process_set: Any = _GLOBAL) -> Handle:
    """Start a grouped allgather."""
    return C.grouped_allgather_async_impl(tensors, name, process_set)


@rejecting(BROADCAST)
@documented("broadcast", returns="A new tensor with the root's values; differentiable.")
def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: Any = _GLOBAL, *, gradient: str = "horovod") -> torch.Tensor:
    """Return ``root_rank``'s ``tensor`` on every rank (a new tensor); differentiable.

    The gradient on the root is the average over ranks of the output gradient (Horovod), or
    their sum with ``gradient="exact"``; zero on the other ranks.
    """
    return BroadcastFn.apply(tensor, root_rank, name, process_set, gradient_mode(gradient))


@rejecting(BROADCAST)
@documented("broadcast",
            returns=("A handle: ``hvd.synchronize(handle)`` returns a new tensor with the root's"
                     " values."))
def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: Any = _GLOBAL) -> Handle:
    """Start a broadcast into a new tensor."""
    return C.broadcast_async_impl(tensor, root_rank, name, process_set, inplace=False)


@rejecting(BROADCAST)
@documented("broadcast", returns="``tensor``, now holding the root's values.")
def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: Any = _GLOBAL) -> torch.Tensor:
    """Broadcast in place: ``tensor`` receives ``root_rank``'s values."""
    return blocking(lambda: broadcast_async_(tensor, root_rank, name, process_set))


@rejecting(BROADCAST)
@documented("broadcast",
            returns=("A handle: ``hvd.synchronize(handle)`` returns ``tensor``, now holding the "
                     "root's values."))
def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: Any = _GLOBAL) -> Handle:
    """Start an in-place broadcast."""
    return C.broadcast_async_impl(tensor, root_rank, name, process_set, inplace=True)


@rejecting(ALLTOALL)
@documented("alltoall",
            returns=("``(output, received_splits)``: the slices every rank sent to this one, "
                     "concatenated in rank order, and how many came from each rank."))
def alltoall(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
             process_set: Any = _GLOBAL) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Send ``splits[i]`` rows of ``tensor`` to rank i; differentiable in ``tensor``.

    Returns the output alone when ``splits`` is None (dim 0 is split evenly), and
    ``(output, received_splits)`` when ``splits`` is given, as Horovod. Bad splits, or a dim 0
    not divisible by the set size without splits, raise ``ArgumentError`` (a ``ValueError``).
    """
    return AlltoallFn.apply(tensor, splits, name, process_set)


@rejecting(ALLTOALL)
@documented("alltoall",
            returns="A handle: ``hvd.synchronize(handle)`` returns ``(output, received_splits)``.")
def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
                   process_set: Any = _GLOBAL) -> Handle:
    """Start an alltoall; ``synchronize`` returns ``(output, received_splits)`` (with or
    without ``splits``, as Horovod)."""
    return C.alltoall_async_impl(tensor, splits, name, process_set)


@rejecting(REDUCESCATTER)
@documented("reducescatter",
            returns="A new tensor: this rank's block of the reduction; differentiable.")
def reducescatter(tensor: torch.Tensor, name: str | None = None,
                  compression: type[Compressor] = Compression.none, op: Any = _core.Average,
                  process_set: Any = _GLOBAL, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0, *, gradient: str = "horovod") -> torch.Tensor:
    """Reduce over ranks, then rank i keeps block i of dim 0 (the first ``dim0 % n`` ranks get
    one row more); differentiable for Sum/Average.

    The gradient is the allgather of the output gradient, times the set size for Sum
    (Horovod); ``gradient="exact"`` gives the derivative of the summed loss instead.
    """
    exact = gradient_mode(gradient)
    compressed, ctx = compression.compress(tensor)
    op = resolve_op(None, op, "reducescatter")
    out = ReducescatterFn.apply(compressed, op, name, process_set, prescale_factor,
                                postscale_factor, exact)
    return compression.decompress(out, ctx)


@rejecting(REDUCESCATTER)
@documented("reducescatter",
            returns="A handle: ``hvd.synchronize(handle)`` returns this rank's block.")
def reducescatter_async(tensor: torch.Tensor, name: str | None = None, op: Any = _core.Average,
                        process_set: Any = _GLOBAL, prescale_factor: float = 1.0,
                        postscale_factor: float = 1.0) -> Handle:
    """Start a reducescatter."""
    op = resolve_op(None, op, "reducescatter")
    return C.reducescatter_async_impl(tensor, op, name, process_set, prescale_factor,
                                      postscale_factor)


@rejecting(REDUCESCATTER, grouped=True)
@documented("reducescatter",
            returns="This rank's block of each reduction, in the order of ``tensors``.")
def grouped_reducescatter(tensors: Sequence[torch.Tensor], name: str | None = None,
                          compression: type[Compressor] = Compression.none,
                          op: Any = _core.Average, process_set: Any = _GLOBAL,
                          prescale_factor: float = 1.0, postscale_factor: float = 1.0, *,
                          gradient: str = "horovod") -> list[torch.Tensor]:
    """Reducescatter a list of tensors as one unit; differentiable for Sum/Average (as
    :func:`reducescatter`)."""
    op = resolve_op(None, op, "grouped_reducescatter")
    exact = gradient_mode(gradient)
    pairs = [compression.compress(t) for t in _tensor_list(tensors, 'grouped collective')]
    if any(t.requires_grad for t, _ in pairs):
        outs = [ReducescatterFn.apply(t, op, None if name is None else f"{name}.{i}",
                                      process_set, prescale_factor, postscale_factor, exact)
                for i, (t, _) in enumerate(pairs)]
    else:
        outs = blocking(lambda: C.grouped_reducescatter_async_impl(
            [t for t, _ in pairs], op, name, process_set, prescale_factor, postscale_factor))
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs, strict=True)]


@rejecting(REDUCESCATTER, grouped=True)
@documented("reducescatter",
            returns="A handle: ``hvd.synchronize(handle)`` returns the list of blocks.")
def grouped_reducescatter_async(tensors: Sequence[torch.Tensor], name: str | None = None,
                                op: Any = _core.Average, process_set: Any = _GLOBAL,
                                prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> Handle:
    """Start a grouped reducescatter."""
    op = resolve_op(None, op, "grouped_reducescatter")
    return C.grouped_reducescatter_async_impl(tensors, op, name, process_set, prescale_factor,
                                              postscale_factor)


@documented()
def barrier(process_set: Any = _GLOBAL) -> None:
    """Block until every rank of ``process_set`` reaches the barrier."""
    _core.barrier(process_set=process_set)


@documented(returns="The rank that joined last.",
            device="Accepted for Horovod compatibility; the join is coordinated on the host.")
def join(device: int = -1) -> int:
    """Signal that this rank has no more data; until every rank has joined, the collectives of
    the ranks still training get the op's identity from this one."""
    return int(_core.join())
