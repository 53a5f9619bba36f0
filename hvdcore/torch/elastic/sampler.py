"""``hvd.elastic.ElasticSampler``: a distributed sampler that resumes an epoch after a reset."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sized
from typing import Any

import torch.utils.data

__all__ = ["ElasticSampler"]


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod 0.28.1's elastic sampler: the epoch's order is one shuffle of all the dataset's
    indices (by ``seed + epoch``); the samples left are that order without its first
    ``processed_num``, padded (by repeating its first indices) to a multiple of the ranks and
    dealt out in turn, so rank ``r`` gets positions ``r``, ``r + size``, ...

    Call :meth:`record_batch` after each batch and commit the state that holds the sampler:
    every rank counts every rank's batch (``batch_size * size`` samples), so after a reset the
    samples processed before the last commit, on any rank, are not processed again and the
    rest are divided among the new ranks. :meth:`set_epoch` starts an epoch with nothing
    processed. The state (:meth:`state_dict`) is Horovod's ``{'epoch', 'processed_num'}``.

    Example::

        sampler = hvd.elastic.ElasticSampler(dataset)
        loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)
        state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    """

    def __init__(self, dataset: Sized, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices: list[int] = []
        self.num_samples = 0
        self.total_size = 0
        self.indices: list[int] = []
        self._order: list[int] = []
        self._order_of: tuple[int, bool, int, int] | None = None
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch``: nothing processed yet, a new shuffle (call it at the end of an
        epoch, so that a reset in the middle of one does not repeat its samples)."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Count one batch of ``batch_size`` on every rank as processed (``batch_idx`` is not
        used, as in Horovod)."""
        self.processed_num += batch_size * self.num_replicas

    def get_indices(self, batch_idx: int, batch_size: int) -> list[int]:
        """The dataset indices of this rank's batch number ``batch_idx`` in this pass."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self) -> dict[str, Any]:
        """``{'epoch', 'processed_num'}`` (what a commit keeps), as Horovod's."""
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` (Horovod's too) on the job's current ranks."""
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self) -> None:
        """Divide the samples not yet processed among the job's current ranks."""
        from hvdcore.torch import basics

        initialized = basics.is_initialized()
        self.num_replicas = basics.size() if initialized else 1
        self.rank = basics.rank() if initialized else 0
        key = (len(self.dataset), self.shuffle, self.seed, self.epoch)
        if key != self._order_of:  # a restore or sync in the same epoch: the same shuffle
            self._order = list(range(key[0]))
            if self.shuffle:
                random.Random(self.seed + self.epoch).shuffle(self._order)
            self._order_of = key
        self.remaining_indices = self._order[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        order = list(self.remaining_indices)
        order += order[:self.total_size - len(order)]
        self.indices = order[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples
