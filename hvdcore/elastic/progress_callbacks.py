"""What the elastic Keras callbacks do, written once for both Keras bindings: mixins without a
Keras base class. :mod:`hvdcore.tensorflow.keras.elastic` and
:mod:`hvdcore.keras.portable_elastic` combine each with their Keras' ``Callback``."""

from __future__ import annotations

from typing import Any

from hvdcore.elastic.state import State

__all__ = ["CommitStateLogic", "UpdateBatchStateLogic", "UpdateEpochStateLogic"]


class CommitStateLogic:
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


class UpdateBatchStateLogic:
    """Keep ``state.batch`` = the batches of the current epoch done (a resumed epoch counts
    from the ``state.batch`` it resumed at); 0 at each epoch's end."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state: Any = state  # (batch: an attribute the user's state was made with)
        self._start = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._start = int(self.state.batch)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.state.batch = self._start + batch + 1

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.batch = 0


class UpdateEpochStateLogic:
    """Keep ``state.epoch`` = the epochs done, across resets: Keras' epoch number is taken as
    absolute when ``fit`` started at ``initial_epoch=state.epoch``, else as counted from
    ``state.epoch``."""

    def __init__(self, state: State) -> None:
        super().__init__()
        self.state: Any = state  # (epoch: an attribute the user's state was made with)
        self._offset: int | None = None

    def on_train_begin(self, logs: Any = None) -> None:
        self._offset = None

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self._offset is None:  # fit's first epoch: state.epoch (absolute) or 0 (relative)
            self._offset = int(self.state.epoch) - epoch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.state.epoch = (self._offset or 0) + epoch + 1
