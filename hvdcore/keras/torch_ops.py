"""The torch backend's collectives for Keras 3: gradients and variables through hvdcore.torch.

Keras 3 on torch trains eagerly: ``model.fit``'s step computes ``v.value.grad`` for every
trainable variable and calls ``optimizer.apply(grads, variables)``. :class:`TorchGradientReducer`
reduces those torch tensors with one :func:`hvdcore.torch.grouped_allreduce` per step (the
core fuses them; host tensors take MPI or Gloo, CUDA tensors NCCL), named after what it reduces
so the response cache serves every step after the first. :func:`broadcast_variables` sets Keras
variables to a root rank's values with the torch binding's broadcasts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import hvdcore.torch as hvd_torch
from hvdcore import Average, global_process_set
from hvdcore.errors import UnsupportedError
from hvdcore.gradient_rule import reduces_gradients
from hvdcore.keras.backend import describe
from hvdcore.keras.reducing import GradientReducer
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


class TorchGradientReducer(GradientReducer):
    """Reduce a list of torch gradients (None entries stay None) over a process set, with one
    :func:`hvdcore.torch.grouped_allreduce` (options: :class:`~hvdcore.keras.reducing.
    GradientReducer`)."""

    BACKEND = "torch"

    def __init__(self, op: Any = Average, compression: type[Compressor] = Compression.none,
                 sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                 process_set: Any = global_process_set) -> None:
        super().__init__(op, compression, sparse_as_dense, gradient_predivide_factor,
                         process_set)

    def reduce(self, grads: Sequence[Any]) -> list[Any]:
        """The gradients reduced over the process set, in the same order."""
        index = [i for i, g in enumerate(grads) if g is not None]
        if not index:
            return list(grads)
        tensors = []
        for i in index:
            t = _torch_tensor(grads[i], "DistributedOptimizer gradient")
            tensors.append(t.to_dense() if t.is_sparse else t)
        if not reduces_gradients(self.process_set):  # as computed (hvdcore.gradient_rule)
            return list(grads)
        op, pre, post = self.scales()
        signature = tuple((str(t.dtype), tuple(t.shape)) for t in tensors)
        reduced = hvd_torch.grouped_allreduce(
            tensors, name=self.name_for(signature, op, pre, post), compression=self.compression,
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
