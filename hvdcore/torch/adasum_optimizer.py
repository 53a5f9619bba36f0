"""``DistributedOptimizer(op=hvd.Adasum)`` in a job of more than one rank: Horovod's Adasum
optimizer (``_DistributedAdasumOptimizer`` in ``horovod/torch/optimizer.py``).

It does not reduce gradients. Each rank applies its own optimizer step to a parameter as soon
as the parameter's gradient is complete (a post-accumulate-grad hook, after
``backward_passes_per_step`` passes: the wrapped optimizer steps with only that parameter in its
groups), and the change it made (``delta = new - start``) goes to an asynchronous in-place
Adasum allreduce, compressed by ``compression``. ``step()`` waits for every delta and sets
each parameter to ``start + Adasum(delta)``; a parameter whose gradient never came (not used
in this step) is stepped there, with whatever gradient it holds. Horovod's limits hold: the
global process set, a power-of-two number of ranks (refused at construction, where Horovod
fails at the first allreduce), ``skip_synchronize()`` refused, ``synchronize()`` doing nothing.

Like :class:`~hvdcore.torch.optimizer.DistributedOptimizer`, it wraps the optimizer (its
``param_groups`` and ``state`` are the wrapped optimizer's) and checks at construction that every
rank wraps the same model. Host (CPU) parameters only: the core's Adasum runs on the host.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

import hvdcore as _core
from hvdcore.errors import HvdcoreError, UnimplementedError, UnsupportedError
from hvdcore.torch.compression import Compression, Compressor
from hvdcore.torch.handles import synchronize as _synchronize
from hvdcore.torch.mpi_ops import allreduce_async_
from hvdcore.torch.optimizer_params import ParameterSetup
from hvdcore.torch.optimizer_wrapping import WrapsOptimizer

__all__ = ["AdasumOptimizer"]


class AdasumOptimizer(WrapsOptimizer, ParameterSetup, torch.optim.Optimizer):
    """Horovod's Adasum delta optimizer (see the module); made by ``DistributedOptimizer``."""

    def __init__(self, optimizer: torch.optim.Optimizer,
                 named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None,
                 compression: type[Compressor] = Compression.none,
                 backward_passes_per_step: int = 1,
                 process_set: Any = _core.global_process_set) -> None:
        if process_set is not _core.global_process_set:
            raise UnimplementedError(
                "DistributedOptimizer(op=Adasum): Adasum runs on the global process set only "
                "(as Horovod's)")
        size = _core.size()
        if size & (size - 1):
            raise UnimplementedError(
                f"DistributedOptimizer(op=Adasum) needs a power-of-two number of ranks (as "
                f"Horovod's Adasum), this job has {size}")
        super().__init__(optimizer.param_groups, optimizer.defaults)
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.wrapped_optimizer = optimizer
        self.op = _core.Adasum
        self.process_set = process_set
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self._names = self._name_parameters(named_parameters)
        self._params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        for p in self._params:
            if p.device.type != "cpu":
                raise UnimplementedError(
                    f"DistributedOptimizer(op=Adasum): parameter '{self._names[p]}' is on "
                    f"{p.device}; hvdcore's Adasum runs on host tensors only")
        self._start = {id(p): torch.zeros_like(p, requires_grad=False) for p in self._params}
        self._delay = {id(p): backward_passes_per_step for p in self._params}
        self._handles: dict[int, tuple[torch.Tensor, Any, Any]] = {}
        self._check_same_model()
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad)
                       for p in self._params]

    def _on_grad(self, p: torch.Tensor) -> None:
        key = id(p)
        if self._delay[key] <= 0:
            raise HvdcoreError(
                "Gradients were computed more than backward_passes_per_step times before the "
                "call to step(). Increase backward_passes_per_step to accumulate gradients "
                "locally.")
        self._delay[key] -= 1
        if self._delay[key] == 0:
            self._step_and_send(p)

    def _step_and_send(self, p: torch.Tensor) -> None:
        """Step ``p`` alone with the wrapped optimizer; start the Adasum of its change."""
        start = self._start[id(p)]
        stashed = [group["params"] for group in self.param_groups]
        try:
            for group in self.param_groups:
                group["params"] = [p] if any(p is q for q in group["params"]) else []
            with torch.no_grad():
                start.copy_(p)
                self.wrapped_optimizer.step()
                p.sub_(start)  # p holds its change until step()
        finally:
            for group, params in zip(self.param_groups, stashed, strict=True):
                group["params"] = params
        sent, ctx = self._compression.compress(p.detach())
        handle = allreduce_async_(sent, name=f"adasum.{self._names[p]}", op=_core.Adasum)
        self._handles[id(p)] = (p, handle, ctx)

    def synchronize(self) -> None:
        """Nothing to do (Horovod's Adasum optimizer finishes its allreduces in ``step()``)."""

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Refused, as Horovod's Adasum optimizer refuses it."""
        raise UnsupportedError("skip_synchronize() is not supported by the Adasum optimizer "
                               "(DistributedOptimizer(op=Adasum)), as in Horovod")
        yield  # (a generator, for contextmanager)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Evaluate ``closure`` (its backward steps the parameters), step the parameters no
        gradient reached, then set each to its start plus the Adasum of the ranks' changes."""
        loss = closure() if closure is not None else None
        for p in self._params:
            if id(p) not in self._handles:
                self._step_and_send(p)
        for p in self._params:
            _, handle, ctx = self._handles.pop(id(p))
            delta = self._compression.decompress(_synchronize(handle), ctx)
            start = self._start[id(p)]
            with torch.no_grad():
                start.add_(delta)
                p.copy_(start)
            self._delay[id(p)] = self.backward_passes_per_step
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients; an error while this step's allreduces are in flight."""
        if self._handles:
            raise HvdcoreError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step(): the Adasum allreduces in flight would race with it. Call "
                "step() first.")
        self.wrapped_optimizer.zero_grad(set_to_none=set_to_none)

    def reset_pending(self) -> None:
        """Forget this step's allreduces without waiting (an elastic generation ended): the
        parameters go back to where the step started."""
        with torch.no_grad():
            for p, _, _ in self._handles.values():
                p.copy_(self._start[id(p)])
        self._handles.clear()
        for k in self._delay:
            self._delay[k] = self.backward_passes_per_step

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self.wrapped_optimizer!r}, op=Adasum)"
