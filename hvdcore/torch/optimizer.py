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
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

import hvdcore as _core
from hvdcore import basics
from hvdcore.arguments import resolve_op
from hvdcore.errors import ArgumentError, HvdcoreError, MismatchError, UnsupportedError
from hvdcore.ops import allreduce_batch_async
from hvdcore.torch import collectives as C
from hvdcore.torch.compression import Compression, Compressor
from hvdcore.torch.handles import Handle

__all__ = ["DistributedOptimizer"]

STEP_AFTER_SYNCHRONIZE = (
    "optimizer.step() called without optimizer.skip_synchronize() context after "
    "optimizer.synchronize(). The gradients are then reduced a second time, which costs "
    "time; wrap the step in `with optimizer.skip_synchronize(): optimizer.step()` when you "
    "call optimizer.synchronize() yourself.")
"""The warning of ``step()`` after ``synchronize()`` outside ``skip_synchronize()``: its first
sentence is Horovod's (``horovod/torch/optimizer.py``), so warning filters written for Horovod
match it."""


class DistributedOptimizer(torch.optim.Optimizer):
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
        op: ``Average`` (default), ``Sum`` or ``Adasum`` (if the core supports it).
        gradient_predivide_factor: with ``Average``, divide by this before the sum and by
            ``size()/factor`` after it (helps fp16 range).
        num_groups: deprecated spelling of ``groups=int``.
        groups: an int N (parameters split into N groups in order) or a list of lists of
            parameters; each group is reduced as one grouped allreduce once all its members
            have gradients.
        sparse_as_dense: reduce sparse gradients as dense tensors instead of allgathering
            their indices and values (the reduced gradient is made sparse again, as Horovod,
            so optimizers such as ``SparseAdam`` keep working).
        process_set: the ranks that average their gradients (default: all).

    Example::

        >>> opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
        >>> opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        >>> loss.backward(); opt.step()                                  # doctest: +SKIP
    """

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
        self._group_of, self._members = self._make_groups(groups or num_groups)
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
        self._check_same_model()
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self._params]

    # ----------------------------------------------------------------------------- set-up
    def _name_parameters(self, named: Iterable[tuple[str, torch.Tensor]] | None
                         ) -> dict[torch.Tensor, str]:
        all_params = [p for g in self.param_groups for p in g["params"]]
        if named is None:
            return {p: f"allreduce.noname.{i}.{j}" for i, g in enumerate(self.param_groups)
                    for j, p in enumerate(g["params"])}
        named = list(named)
        if any(not isinstance(x, tuple) or len(x) != 2 for x in named):
            raise ArgumentError("named_parameters must be (name, parameter) tuples, as produced "
                                "by model.named_parameters()")
        seen: set[str] = set()
        dups = sorted({n for n, _ in named if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
        if dups:
            raise ArgumentError(f"parameter names in named_parameters must be unique; "
                                f"duplicates: {', '.join(dups)}")
        by_id = {id(p): n for n, p in named}
        unnamed = [i for i, p in enumerate(all_params) if id(p) not in by_id]
        if unnamed:
            raise ArgumentError(f"named_parameters was given but {len(unnamed)} parameter(s) "
                                f"of the optimizer are not in it (positions {unnamed[:10]}); "
                                "pass model.named_parameters() of the model the optimizer trains")
        return {p: by_id[id(p)] for p in all_params}

    @property
    def _parameter_names(self) -> dict[torch.Tensor, str]:
        # Horovod's attribute (its tests and some user code read it): parameter -> name.
        return dict(self._names)

    def _make_groups(self, groups: Any) -> tuple[dict[torch.Tensor, int], list[list[Any]]]:
        if not groups:
            return {}, []
        if isinstance(groups, int):
            n = max(1, min(groups, len(self._params)))
            size, extra = divmod(len(self._params), n)
            members, start = [], 0
            for i in range(n):
                stop = start + size + (1 if i < extra else 0)
                members.append(self._params[start:stop])
                start = stop
        else:
            members = [list(g) for g in groups]
            known = set(self._params)
            for g in members:
                for p in g:
                    if p not in known:
                        raise ArgumentError("groups contains a tensor that is not a trainable "
                                            "parameter of this optimizer")
        group_of: dict[torch.Tensor, int] = {}
        for gid, g in enumerate(members):
            for p in g:
                if p in group_of:
                    raise ArgumentError("a parameter appears in more than one group")
                group_of[p] = gid
        return group_of, members

    def _check_same_model(self) -> None:
        if self.process_set.size() == 1:
            return
        mine = [(self._names[p], tuple(p.shape), str(p.dtype), p.requires_grad)
                for g in self.param_groups for p in g["params"]]
        every = _core.allgather_object((mine, self.backward_passes_per_step),
                                       name="DistributedOptimizer.parameters",
                                       process_set=self.process_set)
        if all(e == every[0] for e in every):
            return
        ref = dict((n, rest) for n, *rest in every[0][0])
        problems = []
        for r, (params, bpps) in enumerate(every):
            if bpps != every[0][1]:
                problems.append(f"backward_passes_per_step is {bpps} on rank {r}, "
                                f"{every[0][1]} on rank 0")
            here = {n: rest for n, *rest in params}
            for n in sorted(set(ref) ^ set(here)):
                where = "rank 0" if n in ref else f"rank {r}"
                missing = f"rank {r}" if n in ref else "rank 0"
                problems.append(f"parameter {n!r} exists on {where} but "
                                f"not on {missing}")
            for n in sorted(set(ref) & set(here)):
                if ref[n] != here[n]:
                    problems.append(
                        f"parameter {n!r} is (shape, dtype, trainable)="
                        f"{tuple(here[n])} on rank {r} but {tuple(ref[n])} on rank 0")
        raise MismatchError(
            f"DistributedOptimizer on rank {_core.rank()}: ranks wrap different models: "
            + "; ".join(problems[:8])
            + ". Build the same model on every rank (a parameter unused in some ranks' "
              "forward pass is fine; one that exists only on some ranks is not).")

    # ------------------------------------------------------------------------ gradients
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

    def synchronize(self) -> None:
        """Finish every gradient allreduce of this step (zero gradients for unused parameters).

        Call it before modifying gradients (e.g. clipping), then call ``step()`` inside
        :meth:`skip_synchronize`.
        """
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
        self._handles.clear()
        self._ready.clear()
        self._deferred.clear()
        passes = self.backward_passes_per_step
        for k in self._delay:
            self._delay[k] = passes
        self._synchronized = True

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

        A ``closure`` is evaluated once, before the gradients are averaged (optimizers that
        re-evaluate the closure several times per step, like LBFGS, see only local gradients
        on the re-evaluations).
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
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
        self.wrapped_optimizer.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients; an error while allreduces of this step are still in flight."""
        if self._handles or self._deferred:
            raise HvdcoreError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): the gradient allreduces in flight "
                "would race with it. Call step() (or synchronize()) first.")
        self.wrapped_optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state dict."""
        return self.wrapped_optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load into the wrapped optimizer."""
        self.wrapped_optimizer.load_state_dict(state_dict)
        self.state = self.wrapped_optimizer.state
        self.param_groups = self.wrapped_optimizer.param_groups

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
                self._hooks.append(p.register_post_accumulate_grad_hook(self._on_grad))

    def set_backward_passes_per_step(self, passes: int) -> None:
        """Change ``backward_passes_per_step`` (between steps)."""
        self.backward_passes_per_step = passes
        for k in self._delay:
            self._delay[k] = passes

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("DistributedOptimizer cannot be pickled; save state_dict() instead")

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self.wrapped_optimizer!r})"
