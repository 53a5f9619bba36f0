"""``SyncBatchNorm``: batch normalisation with statistics over the whole distributed batch.

Example::

    >>> bn = hvd.SyncBatchNorm(64)        # drop-in for torch.nn.BatchNorm2d(64)   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

import hvdcore as _core
from hvdcore.errors import ArgumentError
from hvdcore.torch.autograd import AllgatherFn

__all__ = ["SyncBatchNorm"]


class SyncBatchNorm(_BatchNorm):
    """Batch norm over the concatenation of every rank's batch (for any 2-D..5-D input).

    In training mode each rank computes its per-channel mean, biased variance and count; one
    differentiable allgather combines them (parallel-variance formula, so ranks may hold
    different batch sizes, including zero); the backward pass reduces the gradients through
    the allgather's gradient. Running statistics use the unbiased variance of the global
    batch, exactly like ``torch.nn.BatchNorm*d`` on the full batch. In eval mode (or on a
    single rank) it is ordinary batch norm.

    Args:
        num_features: channels ``C`` of an input ``[N, C, ...]``.
        eps, momentum, affine, track_running_stats: as in ``torch.nn.BatchNorm2d``.
        process_set: the ranks whose batches are normalised together.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 process_set: Any = _core.global_process_set) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ArgumentError(f"SyncBatchNorm expects an input [N, C, ...] with at least 2 "
                                f"dimensions, got {input.dim()}-D")
        if input.shape[1] != self.num_features:
            raise ArgumentError(f"SyncBatchNorm({self.num_features}) got {input.shape[1]} "
                                "channels")

    def _average_factor(self) -> float:
        if not (self.training and self.track_running_stats):
            return 0.0
        assert self.num_batches_tracked is not None
        self.num_batches_tracked.add_(1)
        if self.momentum is None:
            return 1.0 / float(self.num_batches_tracked)
        return float(self.momentum)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Normalise ``input`` with batch statistics over all ranks (training) or running ones."""
        self._check_input_dim(input)
        use_batch = self.training or not self.track_running_stats
        if not use_batch or self.process_set.size() == 1:
            factor = self._average_factor()
            return F.batch_norm(input, self.running_mean if not use_batch or
                                self.track_running_stats else None,
                                self.running_var if not use_batch or
                                self.track_running_stats else None,
                                self.weight, self.bias, use_batch, factor, self.eps)
        c = self.num_features
        dims = [0, *range(2, input.dim())]
        stat_dtype = torch.float64 if input.dtype == torch.float64 else torch.float32
        x = input.to(stat_dtype)
        count = input.numel() // c
        if count:
            var, mean = torch.var_mean(x, dim=dims, unbiased=False)
        else:
            mean = var = x.new_zeros(c)
        local = torch.cat([mean, var, x.new_tensor([float(count)])]).unsqueeze(0)
        # exact=True: the statistics need the true derivative of the global batch, not
        # Horovod's averaged allgather gradient.
        every = AllgatherFn.apply(local, None, self.process_set, True)  # [ranks, 2C + 1]
        means, vars_, counts = every[:, :c], every[:, c:2 * c], every[:, 2 * c:]
        total = counts.sum()
        n = float(total.detach())
        if n < 1:
            raise ArgumentError("SyncBatchNorm: the global batch is empty on every rank")
        g_mean = (counts * means).sum(0) / total
        g_var = (counts * (vars_ + (means - g_mean) ** 2)).sum(0) / total
        shape = [1, c] + [1] * (input.dim() - 2)
        y = (x - g_mean.view(shape)) * torch.rsqrt(g_var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats:
            assert self.running_mean is not None and self.running_var is not None
            factor = self._average_factor()
            with torch.no_grad():
                unbiased = g_var * (n / (n - 1)) if n > 1 else g_var
                self.running_mean.mul_(1 - factor).add_(g_mean.to(self.running_mean.dtype),
                                                        alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype),
                                                       alpha=factor)
        return y.to(input.dtype)
