"""From a gradient's arrival to its started allreduce, for
:class:`~hvdcore.torch.optimizer.DistributedOptimizer`.

The post-accumulate-grad hook (:meth:`GradientHooks._on_grad`) counts backward passes; on the
last one the parameter is ready, and its gradient's allreduce is started (alone, with its
group once every member is ready, or, with caller progress, noted and submitted in one batch
by ``synchronize()``). ``synchronize()`` (in the optimizer) waits for what was started here.

:class:`GradientHooks` is a mixin of ``DistributedOptimizer``: it reads the attributes that
class's ``__init__`` sets (annotated below) and is not meant to be used alone.
"""

from __future__ import annotations

from typing import Any

import torch

import hvdcore as _core
from hvdcore.errors import HvdcoreError
from hvdcore.ops import allreduce_batch_async
from hvdcore.torch import collectives as C
from hvdcore.torch.compression import Compression, Compressor
from hvdcore.torch.handles import Handle

__all__ = ["GradientHooks"]


class GradientHooks:
    """The hook on each parameter and the start of its gradient's allreduce."""

    # Set by DistributedOptimizer.__init__ (see there).
    op: Any
    gradient_predivide_factor: float
    sparse_as_dense: bool
    process_set: Any
    backward_passes_per_step: int
    _compression: type[Compressor]
    _names: dict[torch.Tensor, str]
    _id_names: dict[int, str]
    _delay: dict[int, int]
    _group_of: dict[torch.Tensor, int]
    _members: list[list[Any]]
    _handles: dict[Any, tuple[Any, list[tuple[torch.Tensor, torch.Tensor, Any]]]]
    _defer: bool
    _deferred: list[torch.Tensor]
    _batch_names: tuple[str, ...]
    _ready: dict[int, set[torch.Tensor]]

    def _scales(self) -> tuple[float, float]:
        if self.op == _core.Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _on_grad(self, p: torch.Tensor) -> None:
        left = self._delay[id(p)] - 1
        if left < 0:
            raise HvdcoreError(
                f"gradient of {self._names[p]!r} was computed more than "
                f"backward_passes_per_step={self.backward_passes_per_step} times before "
                "step()/synchronize(); raise backward_passes_per_step to accumulate more "
                "passes locally, or call step() after each pass")
        self._delay[id(p)] = left
        if left == 0:
            self._ready_param(p)

    def _ready_param(self, p: torch.Tensor) -> None:
        gid = self._group_of.get(p) if self._group_of else None
        if gid is None:
            if self._defer:
                self._deferred.append(p)
            else:
                self._submit(id(p), [p])
            return
        ready = self._ready.setdefault(gid, set())
        ready.add(p)
        if len(ready) == len(self._members[gid]):
            self._submit(("group", gid), self._members[gid])

    def _dense_grad(self, p: torch.Tensor) -> torch.Tensor:
        """The tensor to reduce for ``p``: its gradient, a zero one when it has none, a dense
        copy of a sparse one (``sparse_as_dense``)."""
        if p.grad is None:
            p.grad = torch.zeros_like(p, memory_format=torch.preserve_format)
        if p.grad.is_sparse and self.sparse_as_dense:
            return p.grad.to_dense()
        return p.grad

    def _submit(self, key: Any, params: list[torch.Tensor],
                batch: list[tuple[Any, str]] | None = None) -> None:
        """Start the allreduce of ``params``' gradients (one parameter, or a group). With
        ``batch``, a gradient the engine reduces in its own memory is appended there instead
        (its handle is None: the caller submits the batch, see :meth:`_submit_deferred`)."""
        if self.process_set.size() == 1:
            for p in params:  # nothing to reduce; unused parameters still get a zero gradient
                if p.grad is None:
                    p.grad = torch.zeros_like(p, memory_format=torch.preserve_format)
            self._handles[key] = (Handle(None, lambda _r: None, "local"), [])
            return
        pre, post = self._scales()
        if len(params) == 1 and params[0].grad is not None and params[0].grad.is_sparse \
                and not self.sparse_as_dense:
            p = params[0]
            grad = p.grad
            assert grad is not None
            h = C.sparse_allreduce_async_impl(grad, self._names[p], self.op, self.process_set)
            self._handles[key] = (h, [(p, grad, "sparse")])
            return
        entries = []
        for p in params:
            grad = self._dense_grad(p)
            if grad.is_sparse:
                raise HvdcoreError(
                    f"parameter {self._names[p]!r} has a sparse gradient inside a group; use "
                    "sparse_as_dense=True or keep sparse parameters out of groups")
            sent, ctx = self._compression.compress(grad)
            entries.append((p, sent, ctx))
        sent_tensors = [s for _, s, _ in entries]
        if len(params) == 1 and key == id(params[0]):
            h = self._start_one(params[0], sent_tensors[0], pre, post, batch)
        else:
            h = C.grouped_allreduce_async_impl(
                sent_tensors, self.op, f"allreduce.group.{key[1]}", pre, post,
                self.process_set, inplace=True)
        self._handles[key] = (h, entries)

    def _start_one(self, p: torch.Tensor, sent: torch.Tensor, pre: float, post: float,
                   batch: list[tuple[Any, str]] | None) -> Any:
        """Start the in-place allreduce of one parameter's (compressed) dense gradient: its
        handle, or None when it joined ``batch``. A host gradient reduced in its own memory
        goes to the core as its NumPy view: the core remembers the checks of the name's
        last call, so a step costs no argument checks."""
        name = self._id_names[id(p)]
        arr = C.inplace_host_array(sent)
        if arr is None:
            return C.allreduce_async_impl(sent, self.op, name, pre, post, self.process_set,
                                          inplace=True)
        if batch is None:
            return _core.allreduce_async(arr, name=name, op=self.op, prescale_factor=pre,
                                         postscale_factor=post, process_set=self.process_set,
                                         out=arr)
        batch.append((arr, name))
        return None

    def _submit_deferred(self) -> list[Any]:
        """Submit the gradients the hooks noted (caller progress); returns the handles of the
        batched ones (in ``_handles`` a batched gradient has None, or no entry when nothing is
        left to do for it after the wait)."""
        batch: list[tuple[Any, str]] = []
        pre, post = self._scales()
        compress, handles = self._compression.compress, self._handles
        local = self.process_set.size() == 1
        plain = self._compression is Compression.none
        names = self._id_names
        for p in self._deferred:
            grad = p.grad
            if local or grad is None or grad.is_sparse:  # the general path decides
                self._submit(id(p), [p], batch)
                continue
            if plain:
                # Uncompressed and reduced in its own memory (the common case): nothing to do
                # for this gradient after the batch, so it needs no entry in _handles.
                arr = C.inplace_host_array(grad)
                if arr is not None:
                    batch.append((arr, names[id(p)]))
                    continue
            sent, ctx = compress(grad)
            handles[id(p)] = (self._start_one(p, sent, pre, post, batch), [(p, sent, ctx)])
        self._deferred.clear()
        if not batch:
            return []
        batch_names = tuple([n for _, n in batch])
        if batch_names == self._batch_names:
            # the same tuple object as last step: the core reuses that batch's checks
            batch_names = self._batch_names
        self._batch_names = batch_names
        return [allreduce_batch_async([a for a, _ in batch], batch_names, self.op,
                                      pre, post, self.process_set)]
