"""hvdcore and its peer in alternating chunks inside one job: the order and the verdict.

A ratio of two runs measured one after the other moves with whatever load lands on one of
them (one night read ``ddp_ratio`` 0.34 under a load of 3-7). The MNIST check splits the
training into ``chunks`` launches per side and alternates them, A B, B A, A B, ..., so that
neighbours in time form a pair, and judges the median of the pairs' ratios: a burst of load
that lands on one pair moves that pair only.

    >>> chunk_order(3)
    ['hvdcore', 'peer', 'peer', 'hvdcore', 'hvdcore', 'peer']
    >>> median_pair_ratio([100.0, 40.0, 100.0], [100.0, 100.0, 110.0])
    0.9091
    >>> chunk_steps(450, 3, 10)
    150
    >>> chunk_steps(200, 3, 10)
    110
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["chunk_order", "chunk_steps", "median_pair_ratio", "pair_ratios"]

#: Fewest steps per epoch a chunk trains beyond its warm-up steps. Chunks of 56 timed steps
#: (200 steps split 3 ways) read hvdcore/DDP 0.45-0.58 in every pair where one run of 190 read
#: 0.72 (2-core VM, load ~8, 2026-12-03): the first steps after the warm-up still cost hvdcore
#: more than DDP, so a chunk must be long enough for them not to weigh.
MIN_TIMED_STEPS = 100


def chunk_order(chunks: int) -> list[str]:
    """The launches of a job: ``chunks`` pairs, hvdcore first in even pairs, the peer in odd
    ones (an ABBA order: a steady drift of the machine cancels out of neighbouring pairs)."""
    if chunks < 1:
        raise ValueError(f"chunks={chunks}: at least 1 expected")
    order: list[str] = []
    for i in range(chunks):
        order += ["hvdcore", "peer"] if i % 2 == 0 else ["peer", "hvdcore"]
    return order


def chunk_steps(steps_per_epoch: int, chunks: int, warmup: int) -> int:
    """Steps per epoch of one chunk: ``steps_per_epoch`` split ``chunks`` ways, never fewer
    than ``warmup`` + :data:`MIN_TIMED_STEPS` (nor more than the whole)."""
    if chunks <= 1:
        return steps_per_epoch
    return min(steps_per_epoch, max(steps_per_epoch // chunks, warmup + MIN_TIMED_STEPS))


def pair_ratios(ours: Sequence[float], theirs: Sequence[float]) -> list[float]:
    """hvdcore's rate over the peer's, pair by pair (chunk i of each side)."""
    if len(ours) != len(theirs) or not ours:
        raise ValueError(f"{len(ours)} hvdcore chunks and {len(theirs)} peer chunks: the same "
                         "number, at least one, expected")
    if min(theirs) <= 0:
        raise ValueError(f"peer rates {list(theirs)}: positive figures expected")
    return [a / b for a, b in zip(ours, theirs, strict=True)]


def median_pair_ratio(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """The judged ratio: the median of :func:`pair_ratios` (rounded to 4 digits)."""
    return round(statistics.median(pair_ratios(ours, theirs)), 4)
