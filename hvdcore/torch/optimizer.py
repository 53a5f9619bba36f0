"""``DistributedOptimizer``: averages gradients over ranks while ``backward()`` still runs.

A documented subclass of ``torch.optim.Optimizer`` that wraps (composition) the user's
optimizer instead of building a class at run time as Horovod does: ``param_groups``, ``state``
and ``defaults`` are the wrapped optimizer's own objects, so learning-rate schedulers,
``state_dict()`` / ``load_state_dict()`` and checkpoints behave as with the wrapped optimizer.
``isinstance(opt, torch.optim.SGD)`` is False (it is True in Horovod); the wrapped optimizer is
``opt.wrapped_optimizer``.

How it works: a post-accumulate-grad hook on every trainable parameter counts backward passes;
on the ``backward_passes_per_step``-th one it starts an asynchronous in-place allreduce of
``p.grad`` (or of its group, see ``groups``), so communication overlaps the rest of the
backward pass. With caller progress (``HVDCORE_PROGRESS``; the default when a rank has one
CPU) nothing would move before ``step()`` anyway: there the hook only notes the gradient, and
``step()`` submits the noted gradients together (:func:`hvdcore.ops.allreduce_batch_async`:
the same names, requests and results; once the ranks cached them, a step's batch is one call
of the engine's steady path, round and fused data together: ``RoundScheduler.steady_batch``).
``step()`` (or ``synchronize()``) also starts the allreduce of every parameter that got no
gradient on this rank (a zero gradient, so ranks that did use it are not left waiting and the
average counts this rank's zero contribution), waits for all of them, and then runs the
wrapped optimizer's ``step``.

At construction every rank checks that all ranks wrap the same parameters (names, shapes,
dtypes, trainability): a model that differs between ranks is a
:class:`~hvdcore.errors.MismatchError` naming the parameters and ranks, instead of a stall.

As Horovod's, it reduces nothing where there is nothing to average with: in a job of one rank
(outside an elastic job, which may grow) and on a rank outside ``process_set``, it hooks no
parameter and is the wrapped optimizer (gradients used as computed, ``step(closure)`` passed on,
no error for extra backward passes or an early ``zero_grad()``).

The class is in four files: this one (construction, ``synchronize()``, ``step()`` and the
``torch.optim.Optimizer`` interface), ``optimizer_params.py`` (parameter names, groups, the
same-model check), ``optimizer_hooks.py`` (the hook, and the start of each allreduce) and
``optimizer_wrapping.py`` (the wrapped optimizer's ``state_dict``; shared with the Adasum
optimizer of ``adasum_optimizer.py``, which ``op=Adasum`` makes in a job of 2+ ranks).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

import hvdcore as _core
from hvdcore import basics
from hvdcore.arguments import gradient_groups, resolve_op
from hvdcore.errors import ArgumentError, HvdcoreError, UnsupportedError
from hvdcore.gradient_rule import reduces_gradients
from hvdcore.torch.compression import Compression, Compressor
from hvdcore.torch.handles import Handle
from hvdcore.torch.optimizer_hooks import GradientHooks
from hvdcore.torch.optimizer_params import ParameterSetup
from hvdcore.torch.optimizer_wrapping import WrapsOptimizer

__all__ = ["DistributedOptimizer"]

STEP_AFTER_SYNCHRONIZE = (
    "optimizer.step() called without optimizer.skip_synchronize() context after "
    "optimizer.synchronize(). The gradients are then reduced a second time, which costs "
    "time; wrap the step in `with optimizer.skip_synchronize(): optimizer.step()` when you "
    "call optimizer.synchronize() yourself.")
"""The warning of ``step()`` after ``synchronize()`` outside ``skip_synchronize()``: its first
sentence is Horovod's (``horovod/torch/optimizer.py``), so warning filters written for Horovod
match it."""


class DistributedOptimizer(WrapsOptimizer, ParameterSetup, GradientHooks, torch.optim.Optimizer):
    """Wrap ``optimizer`` so that ``step()`` applies gradients averaged over all ranks.

    Args:
        optimizer: any ``torch.optim.Optimizer`` (closures: see :meth:`step`).
        named_parameters: ``model.named_parameters()``; names the allreduces (recommended;
            required to be unique and to cover every parameter of ``optimizer``). Without it
            the parameter at position j of param group i is named
            ``allreduce.noname.{i}.{j}``, as Horovod names it (``opt._parameter_names``).
        compression: ``Compression.none`` or ``Compression.fp16`` (gradients travel as fp16).
        backward_passes_per_step: backward passes accumulated locally (summed into ``.grad``)
            before the allreduce; call ``step()`` after that many passes.
        op: ``Average`` (default), ``Sum``, or ``Adasum``: in a job of more than one rank,
            Horovod's Adasum optimizer, which combines parameter changes instead of gradients
            (:mod:`hvdcore.torch.adasum_optimizer`; ``groups``, ``sparse_as_dense`` ignored).
        gradient_predivide_factor: with ``Average``, divide by this before the sum and by
            ``size()/factor`` after it (helps fp16 range).
        num_groups: deprecated spelling of ``groups=int``.
        groups: an int N (parameters split into N groups in order) or a list of lists of
            parameters (of each, its trainable parameters of this optimizer; the others are
            reduced alone); each group is reduced as one grouped allreduce once all its
            members have gradients.
        sparse_as_dense: reduce sparse gradients as dense tensors instead of allgathering
            their indices and values (the reduced gradient is made sparse again, as Horovod,
            so optimizers such as ``SparseAdam`` keep working).
        process_set: the ranks that average their gradients (default: all).

    Example::

        >>> opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
        >>> opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        >>> loss.backward(); opt.step()                                  # doctest: +SKIP
    """

    def __new__(cls, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """Horovod's choice: with ``op=Adasum`` in a job of more than one rank, its Adasum
        optimizer (:class:`~hvdcore.torch.adasum_optimizer.AdasumOptimizer`), which combines
        each step's parameter changes instead of the gradients."""
        op = kwargs["op"] if "op" in kwargs else args[3] if len(args) > 3 else _core.Average
        if resolve_op(None, op, "DistributedOptimizer") != _core.Adasum or _core.size() == 1:
            return super().__new__(cls)
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise UnsupportedError(f"DistributedOptimizer wraps a torch.optim.Optimizer, got "
                                   f"{type(optimizer).__name__}")
        names = ("named_parameters", "compression", "backward_passes_per_step", "op",
                 "gradient_predivide_factor", "num_groups", "groups", "sparse_as_dense",
                 "process_set")
        given = {**dict(zip(names, args, strict=False)), **kwargs}
        if given.get("gradient_predivide_factor", 1.0) != 1.0:
            raise ArgumentError("gradient_predivide_factor is only supported with op=Average")
        from hvdcore.torch.adasum_optimizer import AdasumOptimizer

        return AdasumOptimizer(
            optimizer, given.get("named_parameters"),
            given.get("compression", Compression.none), given.get("backward_passes_per_step", 1),
            given.get("process_set", _core.global_process_set))

    def __init__(self, optimizer: torch.optim.Optimizer,
                 named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None,
                 compression: type[Compressor] = Compression.none,
                 backward_passes_per_step: int = 1, op: Any = _core.Average,
                 gradient_predivide_factor: float = 1.0, num_groups: int = 0,
                 groups: int | list[list[torch.Tensor]] | None = None,
                 sparse_as_dense: bool = False,
                 process_set: Any = _core.global_process_set) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise UnsupportedError(f"DistributedOptimizer wraps a torch.optim.Optimizer, got "
                                   f"{type(optimizer).__name__}")
        if isinstance(optimizer, DistributedOptimizer):
            raise UnsupportedError("optimizer is already a DistributedOptimizer")
        op = resolve_op(None, op, "DistributedOptimizer")
        if gradient_predivide_factor != 1.0 and op != _core.Average:
            raise ArgumentError("gradient_predivide_factor is only supported with op=Average")
        groups = gradient_groups(groups, num_groups, "DistributedOptimizer")
        if backward_passes_per_step < 1:
            raise ArgumentError(f"backward_passes_per_step must be >= 1, got "
                                f"{backward_passes_per_step}")
        # Register the wrapped optimizer's groups (same dict objects), then share its containers.
        super().__init__(optimizer.param_groups, optimizer.defaults)
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        self.wrapped_optimizer = optimizer
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._names = self._name_parameters(named_parameters)
        self._id_names = {id(p): n for p, n in self._names.items()}
        self._params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        # Per-step state is keyed by id(p) (the parameters live as long as the optimizer):
        # torch.Tensor.__hash__ is a Python-level call, and the hooks run for every gradient.
        self._delay = {id(p): backward_passes_per_step for p in self._params}
        self._group_of, self._members = self._make_groups(groups)
        self._handles: dict[Any, tuple[Any, list[tuple[torch.Tensor, torch.Tensor, Any]]]] = {}
        # With caller progress nothing moves before synchronize() anyway: the hooks only note
        # which gradients are ready, and synchronize() submits them together (one queue
        # operation, one handle) instead of one by one between backward kernels.
        st = basics.current()
        self._defer = st is not None and st.engine.caller_progress
        self._deferred: list[torch.Tensor] = []
        self._batch_names: tuple[str, ...] = ()  # the names of the last batch submitted
        self._ready: dict[int, set[torch.Tensor]] = {}
        self._synchronized = False
        self._should_synchronize = True
        # Horovod's rule (_DistributedOptimizer.__init__): hooks only on a member of the set,
        # and only when the job has another rank or is elastic
        self._reducing = reduces_gradients(process_set, others=_core.size())
        self._hooks = []
        if self._reducing:
            self._check_same_model()
            self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad)
                           for p in self._params]

    # ------------------------------------------------------------------------ gradients
    def synchronize(self) -> None:
        """Finish every gradient allreduce of this step (zero gradients for unused parameters).

        Call it before modifying gradients (e.g. clipping), then call ``step()`` inside
        :meth:`skip_synchronize`.
        """
        if not self._reducing:  # nothing was started (one rank, or not in the process set)
            self._synchronized = True
            return
        for p in self._params:
            if self._delay[id(p)] != 0:  # no gradient yet in this step, or fewer passes than set
                self._delay[id(p)] = 0
                self._ready_param(p)
        for handle in self._submit_deferred() if self._deferred else ():
            _core.synchronize(handle)  # in place: the gradients hold the results
        for _key, (handle, entries) in list(self._handles.items()):
            # a torch handle; a core one (the in-place host path: its result is p.grad); None
            # (part of a batch waited for above)
            if handle is None:
                result = None
            elif type(handle) is Handle:
                result = handle.wait()
            else:
                result = _core.synchronize(handle)
            for p, sent, ctx in entries:
                if ctx == "sparse":
                    p.grad = result
                elif p.grad is not None and p.grad.is_sparse:
                    # sparse_as_dense: the reduced dense gradient goes back as a sparse one.
                    p.grad = self._compression.decompress(sent, ctx).to_sparse()
                elif sent is not p.grad and p.grad is not None:
                    with torch.no_grad():
                        p.grad.copy_(self._compression.decompress(sent, ctx))
        self._new_step(synchronized=True)

    def _new_step(self, synchronized: bool) -> None:
        """No reduction in flight, every parameter's pass count back to the start."""
        self._handles.clear()
        self._ready.clear()
        self._deferred.clear()
        passes = self.backward_passes_per_step
        for k in self._delay:
            self._delay[k] = passes
        self._synchronized = synchronized

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Within this context ``step()`` does not synchronize (you called ``synchronize()``).

        Example::

            >>> loss.backward(); opt.synchronize()                        # doctest: +SKIP
            >>> torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)    # doctest: +SKIP
            >>> with opt.skip_synchronize(): opt.step()                   # doctest: +SKIP
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    # -------------------------------------------------------------- optimizer interface
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Synchronize gradients (unless in :meth:`skip_synchronize`), then step.

        Where it reduces (see the module), a ``closure`` is evaluated once, before the
        gradients are averaged, and the wrapped optimizer's step gets its loss; an optimizer
        that evaluates the closure again in the same step (LBFGS with ``max_iter`` > 1) gets
        an :class:`~hvdcore.errors.UnsupportedError` then, since it would step on this rank's
        own gradients and the ranks' models would part. Where it does not reduce (one rank),
        the closure goes to the wrapped optimizer, as in Horovod.
        """
        once = None
        if closure is not None and self._reducing:
            with torch.enable_grad():
                once = _EvaluatedClosure(closure(), type(self.wrapped_optimizer).__name__)
        if self._should_synchronize:
            if self._synchronized:
                # Warned on every such step, attributed to this module as Horovod's is to its
                # own, so Python's filters decide what is shown (the default filter: once per
                # process). The message starts with Horovod's first sentence, so filters
                # copied from Horovod scripts (message="optimizer.step\(\) called without
                # ...") match it.
                warnings.warn(STEP_AFTER_SYNCHRONIZE, UserWarning, stacklevel=1)
            self.synchronize()
        self._synchronized = False
        if once is not None:
            return self.wrapped_optimizer.step(once)
        if closure is not None:
            return self.wrapped_optimizer.step(closure)
        return self.wrapped_optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients; an error while allreduces of this step are still in flight."""
        if self._handles or self._deferred:
            raise HvdcoreError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): the gradient allreduces in flight "
                "would race with it. Call step() (or synchronize()) first.")
        self.wrapped_optimizer.zero_grad(set_to_none=set_to_none)

    def reset_pending(self) -> None:
        """Forget this step's gradient reductions without waiting for them (elastic jobs:
        the generation they were submitted to has ended; hvd.elastic calls this)."""
        self._new_step(synchronized=False)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group to the wrapped optimizer and hook its parameters.

        Must be called on every rank with the same parameters.
        """
        if not hasattr(self, "wrapped_optimizer"):  # called by Optimizer.__init__
            super().add_param_group(param_group)
            return
        self.wrapped_optimizer.add_param_group(param_group)
        gi = len(self.param_groups) - 1
        for j, p in enumerate(self.param_groups[-1]["params"]):
            name = self._names.setdefault(p, f"allreduce.noname.{gi}.{j}")
            self._id_names.setdefault(id(p), name)
            if p.requires_grad and id(p) not in self._delay:
                self._params.append(p)
                self._delay[id(p)] = self.backward_passes_per_step
                if self._reducing:
                    self._hooks.append(p.register_post_accumulate_grad_hook(self._on_grad))

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("DistributedOptimizer cannot be pickled; save state_dict() instead")

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self.wrapped_optimizer!r})"


class _EvaluatedClosure:
    """The closure handed to the wrapped optimizer's ``step`` after ``step()`` evaluated the
    user's (before the gradients were averaged): its first call returns that loss; a second
    call in the same step is an error (see :meth:`DistributedOptimizer.step`)."""

    def __init__(self, loss: Any, optimizer: str) -> None:
        self.loss = loss
        self.optimizer = optimizer
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        if self.calls == 1:
            return self.loss
        raise UnsupportedError(
            f"DistributedOptimizer: {self.optimizer}.step() evaluated the closure again in the "
            "same step; its gradients would be this rank's own and the ranks' models would "
            "part. The closure is evaluated once per step, before the gradients are averaged: "
            "use an optimizer that evaluates it once (for LBFGS: max_iter=1), or run it on "
            "one rank")
