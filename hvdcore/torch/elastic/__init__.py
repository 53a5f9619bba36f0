"""``hvd.elastic`` for torch (Horovod's ``horovod.torch.elastic``).

Example::

    import hvdcore.torch as hvd

    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches):
                step(state.batch)
                if state.batch % 10 == 0:
                    state.commit()
            state.batch = 0

    train(state)

Launch with ``hvdcorerun --gloo --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh``
(see the manual's elastic page); under ``mpirun`` or plain ``srun`` the function runs once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from hvdcore.elastic import HorovodInternalError, HostsUpdatedInterrupt, State, run_fn
from hvdcore.elastic import ObjectState as _ObjectState
from hvdcore.torch.elastic.sampler import ElasticSampler
from hvdcore.torch.elastic.state import TorchState

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HorovodInternalError", "HostsUpdatedInterrupt"]

F = TypeVar("F", bound=Callable[..., Any])


def _reset() -> None:
    from hvdcore.torch.basics import init, shutdown

    shutdown()
    init()


def run(func: F) -> F:
    """Decorator: run ``func(state, ...)`` elastically (see :mod:`hvdcore.elastic.run`)."""
    return run_fn(func, _reset)


class ObjectState(_ObjectState):
    """Picklable values kept across resets: ``hvd.elastic.ObjectState(epoch=0, batch=0)``."""

    def __init__(self, **kwargs: Any) -> None:
        from hvdcore.torch.basics import rank
        from hvdcore.torch.functions import broadcast_object

        super().__init__(broadcast_object, rank, **kwargs)
