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


class CommitStateCallback(_Callback):
    """Commit ``state`` every ``batches_per_commit`` batches and at each epoch's end (the
    count restarts with every ``fit``, so all ranks commit at the same batches)."""

    def __init__(self, state: State, batches_per_commit: int = 1) -> None:
        super().__init__()
        if int(batches_per_commit) < 1:
            raise ValueError(f"batches_per_commit must be >= 1, got {batches_per_commit}")
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs: Any = None) -> None:
        self.batches_remaining = self.batches_per_commit

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.commit()


class UpdateBatchStateCallback(_Callback):
    """Keep ``state.batch`` = the batches of the current epoch done (a resumed epoch counts
    from the ``state.batch`` it resumed at); 0 at each epoch's end."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state = state
        self._start = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._start = int(self.state.batch)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.state.batch = self._start + batch + 1

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.batch = 0


class UpdateEpochStateCallback(_Callback):
    """Keep ``state.epoch`` = the epochs done, across resets: Keras' epoch number is taken as
    absolute when ``fit`` started at ``initial_epoch=state.epoch``, else as counted from
    ``state.epoch``."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state = state
        self._offset: int | None = None

    def on_train_begin(self, logs: Any = None) -> None:
        self._offset = None

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self._offset is None:  # fit's first epoch: state.epoch (absolute) or 0 (relative)
            self._offset = int(self.state.epoch) - epoch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.epoch = (self._offset or 0) + epoch + 1
