"""Interleaved timing shared by the training benchmarks: configurations take turns in chunks.

Each round runs every configuration for ``chunk`` steps, in an order shuffled per round (the
same order on every rank: the steps are collective), between two barriers; a chunk's time is
the slowest rank's. Load that lands during a round lands on every configuration of it, so
the per-round ratios of two configurations hold under bursty load where back-to-back runs
do not. Imported by ``keras_torch_ddp.py``, ``sync_batch_norm.py`` and
``tensorflow_v1_training.py`` (a sibling module: ``python benchmarks/<script>.py`` puts this
folder first on ``sys.path``), which also share its command line (``chunked_parser``) and its
launch-or-work entry (``run``).
"""

from __future__ import annotations

import argparse
import random
import sys
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


def chunked_parser(description: str, *, rounds: int, chunk: int, chunk_help: str,
                   batch_size: int, batch_help: str, warmup: int,
                   warmup_help: str) -> argparse.ArgumentParser:
    """The options every chunked benchmark takes, with that benchmark's defaults.

    ``--np``, ``--rounds``, ``--chunk``, ``--batch-size``, ``--warmup``, ``--json``,
    ``--timeout`` and the hidden ``--worker`` (set on the ranks the driver launches); a
    benchmark adds its own options to the parser this returns.
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--rounds", type=int, default=rounds,
                   help=f"rounds of chunks (default {rounds})")
    p.add_argument("--chunk", type=int, default=chunk, help=f"{chunk_help} (default {chunk})")
    p.add_argument("--batch-size", type=int, default=batch_size,
                   help=f"{batch_help} (default {batch_size})")
    p.add_argument("--warmup", type=int, default=warmup,
                   help=f"{warmup_help} (default {warmup})")
    p.add_argument("--json", help="also write the rates and ratios to this JSON file")
    p.add_argument("--timeout", type=float, default=1800, help="seconds for the launch")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def worker_args(args: argparse.Namespace) -> list[str]:
    """The command-line tail that hands ``chunked_parser``'s options on to the ranks."""
    tail = ["--worker", f"--rounds={args.rounds}", f"--chunk={args.chunk}",
            f"--batch-size={args.batch_size}", f"--warmup={args.warmup}"]
    if args.json:
        tail.append(f"--json={args.json}")
    return tail


def run(args: argparse.Namespace, worker: Callable[[argparse.Namespace], None],
        driver: Callable[[argparse.Namespace], int]) -> None:
    """Work as one rank under ``--worker``; otherwise launch the ranks and exit with the
    driver's status."""
    if args.worker:
        worker(args)
    else:
        sys.exit(driver(args))
