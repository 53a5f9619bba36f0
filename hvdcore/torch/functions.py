"""Broadcasts of model and optimizer state and of Python objects (``horovod.torch.functions``).

Example::

    >>> hvd.broadcast_parameters(model.state_dict(), root_rank=0)      # doctest: +SKIP
    >>> hvd.broadcast_optimizer_state(optimizer, root_rank=0)           # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

import hvdcore as _core
from hvdcore.docstrings import documented
from hvdcore.errors import ArgumentError, UnsupportedError
from hvdcore.torch import collectives as C
from hvdcore.torch.autograd import is_root as root_of

__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
           "allgather_object"]

_GLOBAL = _core.global_process_set


@documented(params="A ``model.state_dict()``, ``model.named_parameters()`` or "
                   "``model.parameters()``; the same model on every rank.")
def broadcast_parameters(params: Mapping[str, torch.Tensor] | Iterable[Any], root_rank: int,
                         process_set: Any = _GLOBAL) -> None:
    """Overwrite ``params`` on every rank with ``root_rank``'s values, in place.

    All broadcasts are started, then awaited (the engine fuses them).
    """
    if isinstance(params, Mapping):
        items = sorted(params.items())
    elif isinstance(params, Iterable) and not isinstance(params, torch.Tensor):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ArgumentError(
            f"broadcast_parameters expects a state_dict, named_parameters() or parameters(), "
            f"got {type(params).__name__}")
    handles = []
    for i, (name, p) in enumerate(items):
        if not isinstance(p, torch.Tensor):
            raise UnsupportedError(f"broadcast_parameters: entry {name or i} is a "
                                   f"{type(p).__name__}, not a tensor")
        label = f"broadcast_parameters.{name if name is not None else i}"
        handles.append(C.broadcast_async_impl(p, root_rank, label, process_set, inplace=True))
    for h in handles:
        h.wait()


@dataclass(frozen=True)
class _TensorSlot:
    index: int
    shape: tuple[int, ...]
    dtype: torch.dtype


def _split(obj: Any, tensors: list[torch.Tensor]) -> Any:
    """Replace every tensor in a nested dict/list/tuple by a slot; collect the tensors."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return _TensorSlot(len(tensors) - 1, tuple(obj.shape), obj.dtype)
    if isinstance(obj, dict):
        return {k: _split(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_split(v, tensors) for v in obj)
    return obj


def _fill(obj: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(obj, _TensorSlot):
        return tensors[obj.index]
    if isinstance(obj, dict):
        return {k: _fill(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_fill(v, tensors) for v in obj)
    return obj


def _slots(obj: Any, out: list[_TensorSlot]) -> list[_TensorSlot]:
    if isinstance(obj, _TensorSlot):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _slots(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _slots(v, out)
    return out


@documented(optimizer="The torch optimizer (or ``DistributedOptimizer``) whose state and options "
                      "every rank gets from the root.")
def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int,
                              process_set: Any = _GLOBAL) -> None:
    """Make every rank's optimizer state and options equal to ``root_rank``'s.

    Works for any optimizer whose ``state_dict()`` nests tensors in dicts/lists/tuples
    (including LBFGS), and for state created lazily: a rank whose optimizer has not stepped yet
    (empty state) receives the root's state, and when the root's state is empty every rank
    ends up with empty state. Options keep their type (an int stays an int, a bool a bool, a
    tuple a tuple, a tensor such as ``lr=torch.tensor(0.1)`` a tensor). As in Horovod, a rank
    whose state is empty gives every trainable parameter without a gradient a zero gradient;
    unlike Horovod, no optimizer step is taken to create the state, so parameters are never
    touched. The structure travels as one pickled object; the tensors as in-place broadcasts.

    Example::

        >>> if resumed_on_rank0: opt.load_state_dict(checkpoint["optimizer"])  # doctest: +SKIP
        >>> hvd.broadcast_optimizer_state(opt, root_rank=0)                     # doctest: +SKIP
    """
    inner = getattr(optimizer, "wrapped_optimizer", optimizer)
    is_root = root_of(root_rank, process_set)
    if not inner.state:
        for group in inner.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
    tensors: list[torch.Tensor] = []
    skeleton = _split(inner.state_dict(), tensors) if is_root else None
    skeleton = _core.broadcast_object(skeleton, root_rank=root_rank,
                                      name="broadcast_optimizer_state.structure",
                                      process_set=process_set)
    slots = _slots(skeleton, [])
    if not is_root:
        tensors = [torch.empty(s.shape, dtype=s.dtype) for s in slots]
    handles = [C.broadcast_async_impl(t, root_rank, f"broadcast_optimizer_state.{i}",
                                      process_set, inplace=True)
               for i, t in enumerate(tensors)]
    for h in handles:
        h.wait()
    if not is_root:
        # Through the wrapper when there is one: torch's load_state_dict replaces the
        # param_groups and state containers, which a DistributedOptimizer shares.
        optimizer.load_state_dict(_fill(skeleton, tensors))


@documented(returns="The root's object, unpickled on every rank.")
def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None,
                     process_set: Any = _GLOBAL) -> Any:
    """Return ``root_rank``'s picklable ``obj`` on every rank.

    Example::

        >>> epoch = hvd.broadcast_object(epoch, root_rank=0)   # doctest: +SKIP
    """
    return _core.broadcast_object(obj, root_rank=root_rank, name=name, process_set=process_set)


@documented(returns="Every rank's object, in rank order.")
def allgather_object(obj: Any, name: str | None = None, process_set: Any = _GLOBAL) -> list[Any]:
    """Return the list of every rank's picklable ``obj``, in rank order."""
    return _core.allgather_object(obj, name=name, process_set=process_set)
