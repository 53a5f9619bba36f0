"""Autograd through the collectives.

Convention: the quantity being differentiated is the **sum of every rank's loss** (what each
rank's ``loss.backward()`` contributes). The gradients below are the exact derivatives under
that convention, so a computation spread over ranks gets the same gradient as the one-process
computation on the concatenated data:

* allreduce Sum/Average: allreduce of the output gradients with the same op and scale factors;
  Min/Max: the summed gradient goes to the rank(s) holding the extreme value (split on ties);
  Product: summed gradient times the product of the other ranks' inputs.
* allgather: sum of the output gradients over ranks, this rank's rows.
* broadcast: sum of the output gradients over ranks on the root, zero elsewhere.
* alltoall: the output gradients sent back along the received splits.
* reducescatter: allgather of the output gradients (scaled for Average).

Horovod averages (instead of summing) the gradients of allgather and broadcast; hvdcore uses
the exact derivative, which differs from Horovod by a factor of the set size there.
"""

from __future__ import annotations

from typing import Any

import torch

import hvdcore as _core
from hvdcore.errors import ArgumentError
from hvdcore.torch import collectives as C

__all__ = ["AllreduceFn", "GroupedAllreduceFn", "AllgatherFn", "BroadcastFn", "AlltoallFn",
           "ReducescatterFn", "is_root"]


def _grad_name(name: str | None) -> str | None:
    return None if name is None else f"{name}.grad"


def is_root(root_rank: int, process_set: Any) -> bool:
    """True on the process whose data a broadcast sends (``root_rank`` is a global rank)."""
    return _core.rank() == root_rank


def _sum(t: torch.Tensor, name: str | None, ps: Any) -> torch.Tensor:
    return C.allreduce_async_impl(t.contiguous(), _core.Sum, name, 1.0, 1.0, ps, False).wait()


class AllreduceFn(torch.autograd.Function):
    """Differentiable allreduce."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: Any, name: str | None, pre: float,
                post: float, ps: Any) -> torch.Tensor:
        ctx.op, ctx.name, ctx.pre, ctx.post, ctx.ps = op, name, pre, post, ps
        if op in (_core.Min, _core.Max, _core.Product):
            ctx.save_for_backward(tensor)
        return C.allreduce_async_impl(tensor, op, name, pre, post, ps, False).wait()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op, name, pre, post, ps = ctx.op, _grad_name(ctx.name), ctx.pre, ctx.post, ctx.ps
        if op in (_core.Sum, _core.Average, _core.Adasum):
            g = C.allreduce_async_impl(grad.contiguous(), op, name, pre, post, ps, False).wait()
            return g, None, None, None, None, None
        (x,) = ctx.saved_tensors
        z = x.detach() * pre
        gsum = _sum(grad, name, ps)
        if op == _core.Product:
            gathered = C.allgather_async_impl(z.unsqueeze(0), None, ps).wait()
            others = torch.cat([gathered[: ps.rank()], gathered[ps.rank() + 1:]])
            return gsum * pre * post * torch.prod(others, dim=0), None, None, None, None, None
        extreme = C.allreduce_async_impl(z, op, None, 1.0, 1.0, ps, False).wait()
        mask = (z == extreme).to(grad.dtype)
        count = _sum(mask, None, ps)
        return gsum * pre * post * mask / count, None, None, None, None, None


class GroupedAllreduceFn(torch.autograd.Function):
    """Differentiable grouped allreduce (Sum, Average, Adasum)."""

    @staticmethod
    def forward(ctx: Any, op: Any, name: str | None, pre: float, post: float, ps: Any,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.op, ctx.name, ctx.pre, ctx.post, ctx.ps = op, name, pre, post, ps
        ctx.shapes = [(t.shape, t.dtype, t.device) for t in tensors]
        out = C.grouped_allreduce_async_impl(list(tensors), op, name, pre, post, ps, False).wait()
        return tuple(out)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        filled = [torch.zeros(s, dtype=d, device=dev) if g is None else g.contiguous()
                  for g, (s, d, dev) in zip(grads, ctx.shapes, strict=True)]
        out = C.grouped_allreduce_async_impl(filled, ctx.op, _grad_name(ctx.name), ctx.pre,
                                             ctx.post, ctx.ps, False).wait()
        return (None, None, None, None, None, *out)


class AllgatherFn(torch.autograd.Function):
    """Differentiable allgather (ragged first dimension)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, ps: Any) -> torch.Tensor:
        ctx.name, ctx.ps, ctx.shape = name, ps, tensor.shape
        return C.allgather_async_impl(tensor, name, ps).wait()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        rows = ctx.shape[0] if len(ctx.shape) else 1
        gsum = _sum(grad, _grad_name(ctx.name), ctx.ps)
        sizes = C.allgather_async_impl(torch.tensor([rows], dtype=torch.int64), None,
                                       ctx.ps).wait()
        offset = int(sizes[: ctx.ps.rank()].sum())
        return gsum.narrow(0, offset, rows).reshape(ctx.shape), None, None


class BroadcastFn(torch.autograd.Function):
    """Differentiable broadcast."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None,
                ps: Any) -> torch.Tensor:
        ctx.root, ctx.name, ctx.ps = root_rank, name, ps
        return C.broadcast_async_impl(tensor, root_rank, name, ps, False).wait()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        gsum = _sum(grad, _grad_name(ctx.name), ctx.ps)
        if not is_root(ctx.root, ctx.ps):
            gsum = torch.zeros_like(gsum)
        return gsum, None, None, None


class AlltoallFn(torch.autograd.Function):
    """Differentiable alltoall; returns ``(output, received_splits)``."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: str | None,
                ps: Any) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.name, ctx.ps = name, ps
        out, received = C.alltoall_async_impl(tensor, splits, name, ps).wait()
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _unused: Any) -> tuple[Any, ...]:
        back, _ = C.alltoall_async_impl(grad.contiguous(), ctx.received, _grad_name(ctx.name),
                                        ctx.ps).wait()
        return back, None, None, None


class ReducescatterFn(torch.autograd.Function):
    """Differentiable reducescatter (Sum and Average)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: Any, name: str | None, ps: Any, pre: float,
                post: float) -> torch.Tensor:
        ctx.op, ctx.name, ctx.ps, ctx.pre, ctx.post = op, name, ps, pre, post
        return C.reducescatter_async_impl(tensor, op, name, ps, pre, post).wait()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        if ctx.op not in (_core.Sum, _core.Average):
            raise ArgumentError("the gradient of reducescatter is defined for Sum and Average, "
                                f"not {ctx.op.name.capitalize()}")
        gathered = C.allgather_async_impl(grad.contiguous(), _grad_name(ctx.name), ctx.ps).wait()
        scale = ctx.pre * ctx.post / (ctx.ps.size() if ctx.op == _core.Average else 1)
        return gathered * scale, None, None, None, None, None
