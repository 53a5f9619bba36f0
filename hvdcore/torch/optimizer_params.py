"""The parameters a :class:`~hvdcore.torch.optimizer.DistributedOptimizer` reduces: the name
of each one's allreduce, the groups reduced together, and the check at construction that every
rank wraps the same model.

:class:`ParameterSetup` is a mixin of ``DistributedOptimizer`` (and of the Adasum optimizer,
which names and checks its parameters the same way): it reads the attributes their
``__init__`` sets (annotated below) and is not meant to be used alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

import hvdcore as _core
from hvdcore.controllers import elastic_env
from hvdcore.errors import ArgumentError, MismatchError

__all__ = ["ParameterSetup"]


class ParameterSetup:
    """Naming, grouping and the same-model check of ``DistributedOptimizer``'s parameters."""

    # Set by DistributedOptimizer.__init__ (param_groups by torch.optim.Optimizer).
    param_groups: list[dict[str, Any]]
    process_set: Any
    backward_passes_per_step: int
    _names: dict[torch.Tensor, str]
    _params: list[torch.Tensor]

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
        dups = sorted({n for n, _ in named
                       if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
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
        if isinstance(groups, int):  # (> 0: arguments.gradient_groups)
            n = max(1, min(groups, len(self._params)))
            size, extra = divmod(len(self._params), n)
            members, start = [], 0
            for i in range(n):
                stop = start + size + (1 if i < extra else 0)
                members.append(self._params[start:stop])
                start = stop
        else:
            members = [list(g) for g in groups]
            if any(not isinstance(p, torch.Tensor) for g in members for p in g):
                raise ArgumentError("groups must be an int or a list of lists of torch.Tensor")
            # Horovod keeps of each group the trainable parameters of this optimizer (a
            # frozen one in groups=[list(model.parameters())] is left out, not an error)
            seen: set[int] = set()
            for g in members:
                for p in g:
                    if id(p) in seen:
                        raise ArgumentError("a parameter appears in more than one group")
                    seen.add(id(p))
            trainable = {id(p) for p in self._params}
            members = [kept for g in members if (kept := [p for p in g if id(p) in trainable])]
        group_of = {p: gid for gid, g in enumerate(members) for p in g}
        return group_of, members

    def _check_same_model(self, elastic_sync: bool = False) -> None:
        if self.process_set.size() == 1:
            return
        if not elastic_sync and elastic_env.current() is not None:
            # an elastic job's new workers build their optimizer while the survivors do not:
            # hvd.elastic's sync() runs this check instead, on every rank after every reset
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
