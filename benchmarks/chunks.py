"""Interleaved timing shared by the training benchmarks: configurations take turns in chunks.

Each round runs every configuration for ``chunk`` steps, in an order shuffled per round (the
same order on every rank: the steps are collective), between two barriers; a chunk's time is
the slowest rank's. Load that lands during a round lands on every configuration of it, so
the per-round ratios of two configurations hold under bursty load where back-to-back runs
do not. Imported by ``keras_torch_ddp.py`` and ``sync_batch_norm.py`` (a sibling module:
``python benchmarks/<script>.py`` puts this folder first on ``sys.path``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any


def interleaved_rates(comm: Any, configs: Sequence[str], step: Callable[[str], None], *,
                      warmup: int, rounds: int, chunk: int, items_per_step: int,
                      progress: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Items per second of each configuration, one value per round.

    ``step(config)`` runs one training step of ``config``; ``warmup`` untimed steps each come
    first (compilation, allocations, the response cache). ``items_per_step``: the items one
    step processes over all ranks. ``progress(r)``, if given, is called after round ``r``
    (1-based) on every rank. ``comm`` is an mpi4py communicator.
    """
    from mpi4py import MPI

    for config in configs:
        for _ in range(warmup):
            step(config)
    rates: dict[str, list[float]] = {c: [] for c in configs}
    order = list(configs)
    shuffle = random.Random(7)
    for r in range(rounds):
        shuffle.shuffle(order)
        for config in order:
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(chunk):
                step(config)
            comm.Barrier()
            seconds = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            rates[config].append(items_per_step * chunk / seconds)
        if progress is not None:
            progress(r + 1)
    return rates


def ratios(rates: dict[str, list[float]], a: str, b: str) -> list[float]:
    """The per-round ratios of configuration ``a``'s rate to ``b``'s."""
    return [p / q for p, q in zip(rates[a], rates[b], strict=True)]
