"""Hierarchical allreduce vs flat: raw mpi4py, hvdcore flat and hvdcore hierarchical in one job.

Run under MPI (one node, 2 or more ranks)::

    mpirun -np 2 python benchmarks/hierarchical.py
    mpirun -np 2 python benchmarks/hierarchical.py --sizes "1 MiB,16 MiB" --json out.json

The script turns ``HVDCORE_HIERARCHICAL_ALLREDUCE`` on itself. hvdcore flat and hierarchical
are the same engine and the same call; between repetitions every rank switches the host plane's
shared-memory path off and on (``enabled_allreduce``), so "flat" is exactly what hvdcore does
without the knob. Peers are interleaved: each round times one raw ``Allreduce`` (into a
preallocated array), then each hvdcore variant, each after a barrier, so load changes hit every
peer alike. Rows: medians over the rounds, busbw = 2(n-1)/n x bytes / time, and the ratio of
busbw to raw mpi4py's (> 1: faster than raw). ``new`` rows return a new array (what
``hvd.allreduce(x)`` users get); ``out=`` rows reduce into a preallocated array.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import hvdcore as hvd
from hvdcore import basics

SIZES = {"64 KiB": 64 << 10, "256 KiB": 256 << 10, "1 MiB": 1 << 20, "4 MiB": 4 << 20,
         "16 MiB": 16 << 20, "64 MiB": 64 << 20}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="1 MiB,4 MiB,16 MiB,64 MiB",
                   help="comma-separated subset of " + ", ".join(SIZES))
    p.add_argument("--min-reps", type=int, default=15, help="rounds at the largest size")
    p.add_argument("--max-reps", type=int, default=100, help="rounds at the smallest size")
    p.add_argument("--json", help="also write the results to this JSON file (rank 0)")
    return p.parse_args()


def timed(comm: MPI.Comm, fn: Callable[[], object]) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HVDCORE_HIERARCHICAL_ALLREDUCE", "1")
    hvd.init()
    plane = basics.state().host_plane
    if not hasattr(plane, "enabled_allreduce"):
        raise SystemExit("the hierarchical plane is not active (HVDCORE_HIERARCHICAL_ALLREDUCE=0?)")
    comm = MPI.COMM_WORLD.Dup()
    n = comm.size
    stats = plane.stats()
    rows = []
    for label in (s.strip() for s in args.sizes.split(",") if s.strip()):
        nbytes = SIZES[label]
        buf = np.random.default_rng(comm.rank).standard_normal(nbytes // 4).astype(np.float32)
        out = np.empty_like(buf)
        frac = (np.log2(nbytes) - 16) / (np.log2(64 << 20) - 16)
        reps = max(args.min_reps, int(args.max_reps * (1 - frac) + args.min_reps * frac))

        def hvd_call(hier: bool, into: np.ndarray | None) -> Callable[[], object]:
            def call() -> object:
                plane.enabled_allreduce = hier
                return hvd.allreduce(buf, op=hvd.Sum, name=f"b.{label}.{hier}.{into is None}",
                                     out=into)
            return call

        peers: dict[str, Callable[[], object]] = {
            "mpi4py": lambda: comm.Allreduce(buf, out, op=MPI.SUM),
            "hvdcore flat new": hvd_call(False, None),
            "hvdcore hier new": hvd_call(True, None),
            "hvdcore flat out=": hvd_call(False, out),
            "hvdcore hier out=": hvd_call(True, out),
        }
        want = hvd_call(False, None)()
        assert np.array_equal(hvd_call(True, None)(), want), "hierarchical result differs"
        for fn in peers.values():  # warm-up (pools, windows, caches)
            fn()
            fn()
        samples: dict[str, list[float]] = {k: [] for k in peers}
        for _ in range(reps):
            for k, fn in peers.items():
                samples[k].append(timed(comm, fn))
        raw = statistics.median(samples["mpi4py"])
        for peer, ts in samples.items():
            t = statistics.median(ts)
            rows.append({"size": label, "bytes": nbytes, "peer": peer, "median_us": t * 1e6,
                         "busbw_GBps": 2 * (n - 1) / n * nbytes / t / 1e9,
                         "busbw_vs_mpi4py": raw / t, "reps": reps})
    plane.enabled_allreduce = True
    if comm.rank == 0:
        print(f"\nallreduce float32, {n} ranks on {stats['nodes']} node(s) "
              f"({MPI.Get_library_version().splitlines()[0]})")
        print(f"{'size':>8} {'peer':>18} {'median us':>11} {'busbw GB/s':>11} "
              f"{'busbw vs mpi4py':>16}")
        for r in rows:
            print(f"{r['size']:>8} {r['peer']:>18} {r['median_us']:>11.1f} "
                  f"{r['busbw_GBps']:>11.3f} {r['busbw_vs_mpi4py']:>15.2f}x")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"ranks": n, "nodes": stats["nodes"], "allreduce": rows}, fh, indent=2)
    comm.Free()
    hvd.shutdown()


if __name__ == "__main__":
    main()
