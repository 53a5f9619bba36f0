"""The torch backend's collectives for Keras 3: gradients and variables through hvdcore.torch.

Keras 3 on torch trains eagerly: ``model.fit``'s step computes ``v.value.grad`` for every
trainable variable and calls ``optimizer.apply(grads, variables)``. :class:`TorchGradientReducer`
reduces those torch tensors with one :func:`hvdcore.torch.grouped_allreduce` per step (the
core fuses them; host tensors take MPI or Gloo, CUDA tensors NCCL), named after what it reduces
so the response cache serves every step after the first. :func:`broadcast_variables` sets Keras
variables to a root rank's values with the torch binding's broadcasts.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import torch

import hvdcore.torch as hvd_torch
from hvdcore import Adasum, Average, ReduceOp, Sum, global_process_set
from hvdcore.arguments import resolve_op
from hvdcore.errors import ArgumentError, UnsupportedError
from hvdcore.keras.backend import describe
from hvdcore.torch.compression import Compression, Compressor

__all__ = ["TorchGradientReducer", "broadcast_variables", "to_numpy"]


def _torch_tensor(value: Any, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    inner = getattr(value, "value", None)  # a Keras variable on the torch backend
    if isinstance(inner, torch.Tensor):
        return inner
    raise UnsupportedError(
        f"{what}: Keras' backend is 'torch', so hvdcore.keras reduces torch tensors, but got a "
        f"{describe(value)} (a tensor of another framework mixed into a torch-backend model)")


class TorchGradientReducer:
    """Reduce a list of torch gradients (None entries stay None) over a process set.

    ``gradient_predivide_factor`` f (op Average only) splits the averaging as Horovod does:
    times 1/f before the sum, times f/size after it.
    """

    def __init__(self, op: Any = Average, compression: type[Compressor] = Compression.none,
                 sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                 process_set: Any = global_process_set) -> None:
        self.op = resolve_op(None, op, "DistributedOptimizer")
        if gradient_predivide_factor != 1.0 and self.op != Average:
            raise ArgumentError(f"gradient_predivide_factor={gradient_predivide_factor} needs "
                                f"op=Average, got op={self.op.name}")
        if self.op not in (Average, Sum, Adasum):
            raise ArgumentError(f"gradients can be reduced with Average, Sum or Adasum, "
                                f"not {self.op.name}")
        if not (isinstance(compression, type) and hasattr(compression, "compress")):
            raise ArgumentError(f"compression must be hvdcore.keras.Compression.none or .fp16 "
                                f"(torch backend), got {compression!r}")
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.process_set = process_set
        self._names: dict[tuple, str] = {}

    def _name(self, tensors: list[torch.Tensor], op: ReduceOp, pre: float, post: float) -> str:
        key = (int(op), pre, post, *((str(t.dtype), tuple(t.shape)) for t in tensors))
        name = self._names.get(key)
        if name is None:
            if len(self._names) >= 64:
                self._names.clear()
            name = self._names[key] = f"keras.gradients.{zlib.crc32(repr(key).encode()):08x}"
        return name

    def _scales(self) -> tuple[ReduceOp, float, float]:
        f = self.gradient_predivide_factor
        if self.op == Average and f != 1.0:
            return Sum, 1.0 / f, f / self.process_set.size()
        return self.op, 1.0, 1.0

    def reduce(self, grads: Sequence[Any]) -> list[Any]:
        """The gradients reduced over the process set, in the same order."""
        index = [i for i, g in enumerate(grads) if g is not None]
        if not index:
            return list(grads)
        tensors = []
        for i in index:
            t = _torch_tensor(grads[i], "DistributedOptimizer gradient")
            tensors.append(t.to_dense() if t.is_sparse else t)
        op, pre, post = self._scales()
        reduced = hvd_torch.grouped_allreduce(
            tensors, name=self._name(tensors, op, pre, post), compression=self.compression,
            op=op, prescale_factor=pre, postscale_factor=post, process_set=self.process_set)
        out = list(grads)
        for i, r in zip(index, reduced, strict=True):
            out[i] = r
        return out


def broadcast_variables(variables: Sequence[Any], root_rank: int,
                        process_set: Any = global_process_set) -> None:
    """Assign ``root_rank``'s values to the Keras ``variables`` on every rank of the set."""
    handles = []
    for i, var in enumerate(variables):
        t = _torch_tensor(var, "broadcast_variables").detach()
        # by position, not by Keras' variable path: paths carry per-process name counters
        # (a rank that built one model more has sequential_1 where the others have sequential)
        handles.append(hvd_torch.broadcast_async(t, root_rank, name=f"keras.broadcast.{i}",
                                                 process_set=process_set))
    for var, handle in zip(variables, handles, strict=True):
        var.assign(hvd_torch.synchronize(handle))


def to_numpy(value: Any) -> Any:
    """A host NumPy copy of a torch tensor or Keras variable."""
    return _torch_tensor(value, "to_numpy").detach().cpu().numpy()
