"""Process sets: collectives restricted to a subset of the ranks (Horovod's ProcessSet API)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hvdcore.errors import ArgumentError


class ProcessSet:
    """A group of global ranks that run collectives among themselves.

    Create one on every rank with the same ranks, then register it with
    :func:`hvdcore.add_process_set` (or pass it to ``init(process_sets=[...])``)::

        >>> evens = hvd.add_process_set([0, 2])
        >>> if evens.included():
        ...     hvd.allreduce(x, process_set=evens)

    ``ranks`` may also be an mpi4py communicator whose ranks are taken in COMM_WORLD numbering.
    """

    def __init__(self, ranks_or_comm: Sequence[int] | Any) -> None:
        if hasattr(ranks_or_comm, "Get_group"):
            from mpi4py import MPI

            group = ranks_or_comm.Get_group()
            ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())),
                                              MPI.COMM_WORLD.Get_group())
        else:
            try:
                items = list(ranks_or_comm)
            except TypeError as exc:
                raise ArgumentError(
                    f"ProcessSet expects a sequence of integer ranks or an mpi4py communicator, "
                    f"got {ranks_or_comm!r}") from exc
            if not all(isinstance(r, (int, np.integer)) and not isinstance(r, bool)
                       for r in items):
                # int(0.5) or int(True) would silently pick a rank nobody asked for
                raise ArgumentError(
                    f"ProcessSet ranks must be integers, got {ranks_or_comm!r}")
            ranks = [int(r) for r in items]
        if len(set(ranks)) != len(ranks):
            raise ArgumentError(f"ProcessSet ranks contain duplicates: {list(ranks)}")
        self.ranks: list[int] = sorted(ranks)
        self.process_set_id: int | None = None
        self._my_rank: int | None = None

    def bind(self, set_id: int, my_rank: int) -> None:
        """Record the registration: the set's id, and this process's global rank (-1: none)."""
        self.process_set_id = set_id
        self._my_rank = my_rank


    def size(self) -> int | None:
        """Number of ranks in the set, or None before it is registered."""
        return None if self.process_set_id is None else len(self.ranks)

    def rank(self) -> int | None:
        """This process's index in the set (None if not registered or not included)."""
        if self.process_set_id is None or self._my_rank not in self.ranks:
            return None
        return self.ranks.index(self._my_rank)

    def included(self) -> bool | None:
        """Whether this process belongs to the set (None before registration)."""
        if self.process_set_id is None:
            return None
        return self._my_rank in self.ranks

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProcessSet) and self.ranks == other.ranks

    def __hash__(self) -> int:
        return hash(tuple(self.ranks))

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet([])
"""The set of all ranks (id 0); its ranks are filled in by ``init()``."""
