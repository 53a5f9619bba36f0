"""Autograd through the collectives.

Two definitions of the gradients are offered, chosen per call with ``gradient=``:

* ``"horovod"`` (the default): Horovod 0.28.1's definitions, so a migrated model trains with
  the same numbers. allreduce (every op) and grouped_allreduce: the output gradients reduced
  with the same op and scale factors; allgather: the **average** over ranks of the output
  gradients, this rank's rows; broadcast: the average over ranks on the root, zero elsewhere;
  reducescatter: allgather of the output gradients, times the set size for Sum, times the
  prescale and postscale factors.
* ``"exact"``: the exact derivative of the **sum of every rank's loss** (what each rank's
  ``loss.backward()`` contributes), so a computation spread over ranks gets the gradient of
  the one-process computation on the concatenated data. allgather and broadcast sum instead
  of averaging; reducescatter divides by the set size for Average (and not multiplies for
  Sum); Min/Max send the summed gradient to the rank(s) holding the extreme value (split on
  ties); Product: summed gradient times the product of the other ranks' inputs.

alltoall has one gradient under both: the output gradients sent back along the received
splits.
"""

from __future__ import annotations

from typing import Any

import torch

import hvdcore as _core
from hvdcore.errors import ArgumentError
from hvdcore.torch import collectives as C
from hvdcore.torch.handles import blocking

__all__ = ["AllreduceFn", "GroupedAllreduceFn", "AllgatherFn", "BroadcastFn", "AlltoallFn",
           "ReducescatterFn", "is_root", "gradient_mode", "GRADIENT_MODES"]

GRADIENT_MODES = ("horovod", "exact")


def gradient_mode(gradient: Any) -> bool:
    """Validate a ``gradient=`` argument; True for ``"exact"``."""
    if gradient not in GRADIENT_MODES:
        raise ArgumentError(f"gradient must be one of {', '.join(map(repr, GRADIENT_MODES))}, "
                            f"got {gradient!r}")
    return gradient == "exact"


def _grad_name(name: str | None) -> str | None:
    return None if name is None else f"{name}.grad"


def is_root(root_rank: int, process_set: Any) -> bool:
    """True on the process whose data a broadcast sends (``root_rank`` is a global rank)."""
    return _core.rank() == root_rank


def _reduce(t: torch.Tensor, op: Any, name: str | None, ps: Any) -> torch.Tensor:
    return blocking(lambda: C.allreduce_async_impl(t.contiguous(), op, name, 1.0, 1.0, ps,
                                                   False))


class AllreduceFn(torch.autograd.Function):
    """Differentiable allreduce."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: Any, name: str | None, pre: float,
                post: float, ps: Any, exact: bool = False) -> torch.Tensor:
        ctx.op, ctx.name, ctx.pre, ctx.post, ctx.ps, ctx.exact = op, name, pre, post, ps, exact
        if exact and op in (_core.Min, _core.Max, _core.Product):
            ctx.save_for_backward(tensor)
        return C.allreduce_impl(tensor, op, name, pre, post, ps)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op, name, pre, post, ps = ctx.op, _grad_name(ctx.name), ctx.pre, ctx.post, ctx.ps
        none = (None,) * 6
        if not ctx.exact or op in (_core.Sum, _core.Average, _core.Adasum):
            return (C.allreduce_impl(grad.contiguous(), op, name, pre, post, ps), *none)
        (x,) = ctx.saved_tensors
        z = x.detach() * pre
        gsum = _reduce(grad, _core.Sum, name, ps)
        if op == _core.Product:
            gathered = blocking(lambda: C.allgather_async_impl(z.unsqueeze(0), None, ps))
            others = torch.cat([gathered[: ps.rank()], gathered[ps.rank() + 1:]])
            return (gsum * pre * post * torch.prod(others, dim=0), *none)
        extreme = blocking(lambda: C.allreduce_async_impl(z, op, None, 1.0, 1.0, ps, False))
        mask = (z == extreme).to(grad.dtype)
        count = _reduce(mask, _core.Sum, None, ps)
        return (gsum * pre * post * mask / count, *none)


class GroupedAllreduceFn(torch.autograd.Function):
    """Differentiable grouped allreduce: the output gradients reduced as one group with the
    same op and scale factors (Horovod's definition; the exact gradient for Sum/Average)."""

    @staticmethod
    def forward(ctx: Any, op: Any, name: str | None, pre: float, post: float, ps: Any,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.op, ctx.name, ctx.pre, ctx.post, ctx.ps = op, name, pre, post, ps
        ctx.shapes = [(t.shape, t.dtype, t.device) for t in tensors]
        out = blocking(lambda: C.grouped_allreduce_async_impl(list(tensors), op, name, pre,
                                                              post, ps, False))
        return tuple(out)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[Any, ...]:
        filled = [torch.zeros(s, dtype=d, device=dev) if g is None else g.contiguous()
                  for g, (s, d, dev) in zip(grads, ctx.shapes, strict=True)]
        out = blocking(lambda: C.grouped_allreduce_async_impl(
            filled, ctx.op, _grad_name(ctx.name), ctx.pre, ctx.post, ctx.ps, False))
        return (None, None, None, None, None, *out)


class AllgatherFn(torch.autograd.Function):
    """Differentiable allgather (ragged first dimension)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, ps: Any,
                exact: bool = False) -> torch.Tensor:
        ctx.name, ctx.ps, ctx.shape, ctx.exact = name, ps, tensor.shape, exact
        return blocking(lambda: C.allgather_async_impl(tensor, name, ps))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        rows = ctx.shape[0] if len(ctx.shape) else 1
        op = _core.Sum if ctx.exact else _core.Average
        reduced = _reduce(grad, op, _grad_name(ctx.name), ctx.ps)
        sizes = blocking(lambda: C.allgather_async_impl(
            torch.tensor([rows], dtype=torch.int64), None, ctx.ps))
        offset = int(sizes[: ctx.ps.rank()].sum())
        return reduced.narrow(0, offset, rows).reshape(ctx.shape), None, None, None


class BroadcastFn(torch.autograd.Function):
    """Differentiable broadcast."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None,
                ps: Any, exact: bool = False) -> torch.Tensor:
        ctx.root, ctx.name, ctx.ps, ctx.exact = root_rank, name, ps, exact
        return blocking(lambda: C.broadcast_async_impl(tensor, root_rank, name, ps, False))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op = _core.Sum if ctx.exact else _core.Average
        reduced = _reduce(grad, op, _grad_name(ctx.name), ctx.ps)
        if not is_root(ctx.root, ctx.ps):
            reduced = torch.zeros_like(reduced)
        return reduced, None, None, None, None


class AlltoallFn(torch.autograd.Function):
    """Differentiable alltoall; returns ``output`` alone without splits (as Horovod), else
    ``(output, received_splits)``."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: str | None,
                ps: Any) -> Any:
        ctx.name, ctx.ps = name, ps
        out, received = blocking(lambda: C.alltoall_async_impl(tensor, splits, name, ps))
        ctx.received = received
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_unused: Any) -> tuple[Any, ...]:
        back, _ = blocking(lambda: C.alltoall_async_impl(
            grad.contiguous(), ctx.received, _grad_name(ctx.name), ctx.ps))
        return back, None, None, None


class ReducescatterFn(torch.autograd.Function):
    """Differentiable reducescatter (Sum and Average)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, op: Any, name: str | None, ps: Any, pre: float,
                post: float, exact: bool = False) -> torch.Tensor:
        ctx.op, ctx.name, ctx.ps, ctx.pre, ctx.post, ctx.exact = op, name, ps, pre, post, exact
        return blocking(lambda: C.reducescatter_async_impl(tensor, op, name, ps, pre, post))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        if ctx.op not in (_core.Sum, _core.Average):
            raise ArgumentError("the gradient of reducescatter is defined for Sum and Average, "
                                f"not {ctx.op.name.capitalize()}")
        gathered = blocking(lambda: C.allgather_async_impl(grad.contiguous(),
                                                           _grad_name(ctx.name), ctx.ps))
        n = ctx.ps.size()
        if ctx.exact:
            scale = 1.0 / n if ctx.op == _core.Average else 1.0
        else:
            scale = float(n) if ctx.op == _core.Sum else 1.0
        return gathered * (scale * ctx.pre * ctx.post), None, None, None, None, None, None
