"""Adasum allreduce (``op=hvd.Adasum``) against raw MPI, in one job.

Run under MPI with a power-of-two number of ranks::

    mpirun -np 2 python benchmarks/adasum.py
    mpirun -np 4 --oversubscribe python benchmarks/adasum.py --sizes 4KiB,1MiB --reps 20

float32 tensors. Peers, interleaved repetition by repetition in a new random order each time
(so load that lands on one lands on all), each call after an MPI barrier:

- ``mpi4py Allreduce Sum``: the floor of any reduction of that size (no Adasum can beat it);
- ``raw Adasum``: the same algorithm with no engine: :func:`hvdcore.engine.adasum.allreduce`
  over mpi4py ``Sendrecv`` (whole vectors with rank ^ level, NumPy arithmetic), into buffers
  made once (what a hand-written loop would keep), the input copied in first as hvdcore does;
- ``raw Adasum again``: the same call a second time: the spread of two identical peers;
- ``hvd.allreduce(x, op=Adasum)``, what users call, and ``hvd.allreduce(x, op=Sum)``.

Columns: median microseconds, and ratios of medians against raw Adasum and against the Sum
floor (1.00x = as fast; smaller is faster). After the timings, every Adasum peer's result is
compared with the one-process tree (:func:`hvdcore.engine.adasum.tree_reduce`): a mismatch
exits 1. The header prints the load average: figures taken while other work shares the
cores are noise.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import hvdcore as hvd
from hvdcore.engine import adasum


def parse_size(text: str) -> int:
    """'4KiB', '1MiB', '512' -> bytes."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="4KiB,64KiB,1MiB,16MiB",
                        help="tensor sizes in bytes (float32), comma separated "
                             "(default: %(default)s)")
    parser.add_argument("--reps", type=int, default=30,
                        help="timed repetitions of each peer per size (default: %(default)s)")
    args = parser.parse_args()
    hvd.init()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size & (size - 1):
        if rank == 0:
            print(f"adasum.py: Adasum needs a power-of-two number of ranks, got {size}",
                  file=sys.stderr)
        return 2
    if rank == 0:
        print(f"# Adasum allreduce, {size} ranks, float32; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        print("| size | peer | median us | vs raw Adasum | vs Sum floor |")
        print("|---|---|---|---|---|")

    def raw_adasum(x: np.ndarray, work: np.ndarray, got: np.ndarray) -> np.ndarray:
        """The algorithm on raw MPI: the input copied into a work buffer (the result), the
        partner's vector received into a buffer of its own, both made once per size."""
        def swap(vector: np.ndarray, partner: int) -> np.ndarray:
            comm.Sendrecv(vector, dest=partner, recvbuf=got, source=partner)
            return got

        np.copyto(work, x)
        return adasum.allreduce(work, [len(x)], rank, size, swap)

    failed = False
    for size_text in args.sizes.split(","):
        n = max(1, parse_size(size_text) // 4)
        x = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        out, work, got = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        work2, got2 = np.empty_like(x), np.empty_like(x)
        peers: dict[str, Callable[[], object]] = {
            "mpi4py Allreduce Sum": lambda: comm.Allreduce(x, out, op=MPI.SUM),
            "raw Adasum": lambda: raw_adasum(x, work, got),
            "raw Adasum again": lambda: raw_adasum(x, work2, got2),
            "hvd.allreduce(x, op=Adasum)": lambda: hvd.allreduce(x, op=hvd.Adasum,
                                                                 name="bench.adasum"),
            "hvd.allreduce(x, op=Sum)": lambda: hvd.allreduce(x, op=hvd.Sum, name="bench.sum"),
        }
        times: dict[str, list[float]] = {k: [] for k in peers}
        order = list(peers)
        shuffle = random.Random(7)  # the same order on every rank (the calls are collective)
        for rep in range(args.reps + 2):
            shuffle.shuffle(order)
            for label in order:
                comm.Barrier()
                t0 = time.perf_counter()
                peers[label]()
                if rep >= 2:  # two warm-up rounds (caches, the response cache)
                    times[label].append(time.perf_counter() - t0)
        want = adasum.tree_reduce(comm.allgather(x))
        for label in ("raw Adasum", "hvd.allreduce(x, op=Adasum)"):
            got = np.asarray(peers[label]())
            if not np.array_equal(got, want):
                print(f"rank {rank}: {label} at {size_text} differs from the tree", flush=True)
                failed = True
        med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
        # every rank's medians differ a little; rank 0's slowest-rank view: the max over ranks
        med = {k: comm.allreduce(v, op=MPI.MAX) for k, v in med.items()}
        if rank == 0:
            for label, us in med.items():
                print(f"| {size_text} | {label} | {us:.1f} | {us / med['raw Adasum']:.2f}x | "
                      f"{us / med['mpi4py Allreduce Sum']:.2f}x |", flush=True)
    failed = comm.allreduce(failed, op=MPI.LOR)
    if rank == 0:
        print("results: " + ("MISMATCH" if failed else "every Adasum peer equals the tree"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
