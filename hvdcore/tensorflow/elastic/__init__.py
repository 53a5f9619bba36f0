"""``hvd.elastic`` for TensorFlow 2 (Horovod's ``horovod.tensorflow.elastic``).

Example (a custom training loop; Keras ``model.fit`` has :mod:`hvdcore.tensorflow.keras.elastic`)::

    import hvdcore.tensorflow as hvd

    hvd.init()
    opt.build(model.trainable_variables)  # every rank has the optimizer's variables
    state = hvd.elastic.TensorFlowState(model.variables + opt.variables, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches):
                step(state.batch)
                state.commit()
            state.batch = 0

    train(state)

Launch with ``hvdcorerun --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh``; under
``mpirun`` or plain ``srun`` the function runs once. The reset between generations is this
binding's ``shutdown()`` + ``init()``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from hvdcore import errors
from hvdcore.elastic import HorovodInternalError, HostsUpdatedInterrupt, State, run_fn
from hvdcore.elastic import ObjectState as _ObjectState
from hvdcore.tensorflow.elastic.state import TensorFlowKerasState, TensorFlowState

__all__ = ["run", "State", "ObjectState", "TensorFlowState", "TensorFlowKerasState",
           "HorovodInternalError", "HostsUpdatedInterrupt"]

F = TypeVar("F", bound=Callable[..., Any])


def _reset() -> None:
    from hvdcore.tensorflow.device_path import init, shutdown

    shutdown()
    init()


#: hvdcore's errors that mean a lost peer, as TensorFlow reports them when they were raised
#: inside a ``tf.function`` (a ``tf.errors.UnknownError`` whose message names the class)
_PEER_LOST = ("RankFailedError", "ShutdownError", "StallError")


def _peer_lost(exc: BaseException) -> errors.HvdcoreError | None:
    import tensorflow as tf

    if not isinstance(exc, tf.errors.OpError):
        return None
    text = str(exc)
    for name in _PEER_LOST:
        if f"{name}:" in text:
            line = next((ln for ln in text.splitlines() if f"{name}:" in ln), name)
            return getattr(errors, name)(line.strip()[:500])
    return None


def run(func: F) -> F:
    """Decorator: run ``func(state, ...)`` elastically (see :mod:`hvdcore.elastic.run`).

    A peer's loss raised inside a ``tf.function`` (a compiled step, Keras' ``fit``) reaches
    Python as a ``tf.errors.UnknownError``; it is turned back into hvdcore's error, so that the
    survivors roll back at once instead of waiting for the launcher to count the failure.
    """

    @functools.wraps(func)
    def translated(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            lost = _peer_lost(exc)
            if lost is None:
                raise
            raise lost from exc

    return run_fn(translated, _reset)  # type: ignore[arg-type,return-value]


class ObjectState(_ObjectState):
    """Picklable values kept across resets: ``hvd.elastic.ObjectState(epoch=0, batch=0)``."""

    def __init__(self, **kwargs: Any) -> None:
        from hvdcore import broadcast_object, rank

        super().__init__(broadcast_object, rank, **kwargs)
