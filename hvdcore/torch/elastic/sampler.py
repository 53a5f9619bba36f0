"""``hvd.elastic.ElasticSampler``: a distributed sampler that resumes an epoch after a reset."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sized
from typing import Any

import torch.utils.data

__all__ = ["ElasticSampler"]


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's elastic sampler: each rank's share of the dataset's indices not yet processed
    in this epoch, shuffled by ``seed + epoch`` and padded (by repeating the first indices) to
    an equal length on every rank.

    Call :meth:`record_batch` (or :meth:`record_indices`) after each batch and commit the
    state that holds the sampler: after a reset the samples processed before the last commit,
    on any rank, are not processed again and the rest are divided among the new ranks.
    :meth:`set_epoch` starts an epoch with nothing processed.

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
        self.processed_indices: set[int] = set()
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices: list[int] = []
        self.num_samples = 0
        self.total_size = 0
        self.indices: list[int] = []
        self._order: list[int] = []  # this pass's padded order, every rank's share in turn
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch``: nothing processed yet, a new shuffle."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Mark batch number ``batch_idx`` (of ``batch_size``) as processed, on every rank.

        Synchronous training steps through the ranks' batches together, and each rank's share
        of this pass follows from the shuffle, so this rank records every rank's batch
        ``batch_idx``, not only its own (Horovod records its own and unites the ranks' records
        at the next sync). The difference shows when a rank dies: its committed batches are
        not processed again.
        """
        start = batch_idx * batch_size
        for r in range(self.num_replicas):
            share = self._order[r:self.total_size:self.num_replicas]
            self.record_indices(share[start:start + batch_size])

    def record_indices(self, indices: Any) -> None:
        """Mark dataset indices as processed."""
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx: int, batch_size: int) -> list[int]:
        """The dataset indices of this rank's batch number ``batch_idx`` in this pass."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self) -> dict[str, Any]:
        """The epoch and the processed indices (what a commit keeps)."""
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` (on the job's current ranks)."""
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self) -> None:
        """Divide the unprocessed indices among the job's current ranks."""
        from hvdcore.torch import basics

        initialized = basics.is_initialized()
        self.num_replicas = basics.size() if initialized else 1
        self.rank = basics.rank() if initialized else 0
        self.remaining_indices = [i for i in range(len(self.dataset))
                                  if i not in self.processed_indices]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        order = list(self.remaining_indices)
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        order += order[:self.total_size - len(order)]
        self._order = order
        self.indices = order[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples
