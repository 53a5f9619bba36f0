"""``hvd.elastic`` for Keras on TensorFlow (Horovod's ``horovod.tensorflow.keras.elastic`` and
``horovod.keras.elastic``): ``KerasState`` and the callbacks that commit and track progress
inside ``model.fit``.

Example::

    import hvdcore.tensorflow.keras as hvd   # or hvdcore.keras (KERAS_BACKEND=tensorflow)

    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss=...)
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        if state.batch:  # resume a partial epoch where its last commit left it
            model.fit(data, steps_per_epoch=steps - state.batch, initial_epoch=state.epoch,
                      epochs=state.epoch + 1, callbacks=callbacks)
        model.fit(data, steps_per_epoch=steps, initial_epoch=state.epoch, epochs=epochs,
                  callbacks=callbacks)

    train(state)

Differences from Horovod, both for correct resumption: ``state.batch`` counts the batches of
the current epoch done (Horovod stores the last batch's index, one less), and
``UpdateEpochStateCallback`` works with ``fit(initial_epoch=state.epoch, ...)`` as well as
with ``fit(epochs=epochs - state.epoch)`` (Horovod's double-counts the former). Keras runs
each epoch for ``steps_per_epoch`` batches whatever a callback does, so a partial epoch is
resumed by a ``fit`` call of its remaining steps, as above.
"""

from __future__ import annotations

from typing import Any

from hvdcore.elastic.progress_callbacks import (
    CommitStateLogic,
    UpdateBatchStateLogic,
    UpdateEpochStateLogic,
)
from hvdcore.tensorflow.elastic import (
    HorovodInternalError,
    HostsUpdatedInterrupt,
    ObjectState,
    State,
    TensorFlowKerasState,
    run,
)
from hvdcore.tensorflow.keras.callbacks import _Callback

__all__ = ["run", "State", "ObjectState", "TensorFlowKerasState", "KerasState",
           "CommitStateCallback", "UpdateBatchStateCallback", "UpdateEpochStateCallback",
           "HorovodInternalError", "HostsUpdatedInterrupt"]


class KerasState(TensorFlowKerasState):
    """Horovod's ``KerasState(model, optimizer=None, **kwargs)``: a Keras model, its
    optimizer and picklable values kept across resets (see :class:`TensorFlowKerasState`)."""

    def __init__(self, model: Any, optimizer: Any = None, **kwargs: Any) -> None:
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(CommitStateLogic, _Callback):
    __doc__ = CommitStateLogic.__doc__


class UpdateBatchStateCallback(UpdateBatchStateLogic, _Callback):
    __doc__ = UpdateBatchStateLogic.__doc__


class UpdateEpochStateCallback(UpdateEpochStateLogic, _Callback):
    __doc__ = UpdateEpochStateLogic.__doc__
