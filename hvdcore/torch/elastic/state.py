"""``hvd.elastic.TorchState``: a model, an optimizer, samplers and plain values kept across
resets."""

from __future__ import annotations

import abc
import copy
from typing import Any

import torch

from hvdcore.elastic.state import ObjectState
from hvdcore.torch.elastic.sampler import ElasticSampler

__all__ = ["TorchState"]


class _Handler(abc.ABC):
    """How one kind of value is saved, restored and synced."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.save()

    def set_value(self, value: Any) -> None:
        """Track ``value`` from now on, saved as it is now."""
        self.value = value
        self.save()

    def save(self) -> None:
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(self._saved)

    @abc.abstractmethod
    def sync(self) -> None:
        """Make every rank's value rank 0's (each kind of value its own way)."""


class _ModelHandler(_Handler):
    def sync(self) -> None:
        from hvdcore.torch.functions import broadcast_parameters

        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def restore(self) -> None:
        self.value.load_state_dict(self._saved)
        _forget_pending(self.value)

    def sync(self) -> None:
        from hvdcore.torch.functions import broadcast_optimizer_state

        _forget_pending(self.value)
        check = getattr(self.value, "_check_same_model", None)
        if check is not None:  # skipped at construction in elastic jobs (see there)
            check(elastic_sync=True)
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_Handler):
    def sync(self) -> None:
        from hvdcore.torch.functions import broadcast_object

        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank=0))


def _forget_pending(optimizer: Any) -> None:
    """A DistributedOptimizer's gradient reductions of a generation that ended are void."""
    reset = getattr(optimizer, "reset_pending", None)
    if reset is not None:
        reset()


def _handler(value: Any) -> _Handler | None:
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    if isinstance(value, torch.optim.Optimizer) or hasattr(value, "wrapped_optimizer"):
        return _OptimizerHandler(value)
    return None


class TorchState(ObjectState):
    """Horovod's ``TorchState``: ``TorchState(model, optimizer, sampler=s, epoch=0, batch=0)``.

    Modules (their ``state_dict``), optimizers (also hvdcore's ``DistributedOptimizer``) and
    :class:`ElasticSampler` objects are copied at each commit, restored after a failure and
    broadcast from rank 0 after a reset; any other keyword is a picklable value, as in
    :class:`~hvdcore.elastic.ObjectState`. All are attributes: ``state.model``,
    ``state.epoch``; ``model`` and ``optimizer`` are plain ``None`` when not given.

    Assigning a new object to a handled attribute (``state.optimizer = new_opt``, say in a
    reset callback) makes commit, restore and sync act on it from then on, and saves its
    current state, as Horovod's ``TorchState`` does.
    """

    def __init__(self, model: Any = None, optimizer: Any = None, **kwargs: Any) -> None:
        from hvdcore.torch.basics import rank
        from hvdcore.torch.functions import broadcast_object

        values = dict(kwargs)
        values.update(model=model, optimizer=optimizer)
        self._handlers: dict[str, _Handler] = {}
        plain: dict[str, Any] = {}
        for name, value in values.items():
            handler = _handler(value)
            if handler is None:
                plain[name] = value
            else:
                self._handlers[name] = handler
                setattr(self, name, value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **plain)

    def save(self) -> None:
        """See :meth:`hvdcore.elastic.State.save`."""
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self) -> None:
        """See :meth:`hvdcore.elastic.State.restore`."""
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self) -> None:
        """See :meth:`hvdcore.elastic.State.sync`."""
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def __setattr__(self, name: str, value: Any) -> None:
        """Re-point the handler of a handled attribute that is already set (then save it)."""
        handlers = self.__dict__.get("_handlers")
        if handlers is not None and name in handlers and name in self.__dict__:
            handlers[name].set_value(value)
        super().__setattr__(name, value)
