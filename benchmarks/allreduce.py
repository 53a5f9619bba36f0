"""Allreduce latency and bus bandwidth: hvdcore vs raw mpi4py vs torch.distributed (gloo).

Run under MPI with 2 (or more) ranks::

    hvdcorerun -np 2 python benchmarks/allreduce.py            # or: mpirun -np 2 python ...
    hvdcorerun -np 2 python benchmarks/allreduce.py --json results.json

Every peer runs in the same job on the same buffers. Each repetition starts after a raw MPI
barrier and times one float32 allreduce; the table shows medians over the repetitions, the bus
bandwidth busbw = 2(n-1)/n x bytes / time, and the ratio of each peer's median time to raw
mpi4py's (1.00 = as fast as raw MPI; smaller is faster). A second table compares 100 tensors of
64 KiB submitted together (100 async calls, or one grouped_allreduce; hvdcore fuses them) with
100 separate blocking calls.
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

SIZES = {"4 KiB": 4 << 10, "64 KiB": 64 << 10, "1 MiB": 1 << 20, "16 MiB": 16 << 20,
         "64 MiB": 64 << 20}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default=",".join(SIZES), help="comma-separated subset of " +
                   ", ".join(SIZES))
    p.add_argument("--min-reps", type=int, default=10, help="repetitions for the largest size")
    p.add_argument("--max-reps", type=int, default=400, help="repetitions for the smallest size")
    p.add_argument("--no-torch", action="store_true", help="skip torch.distributed gloo")
    p.add_argument("--json", help="also write the results to this JSON file (rank 0)")
    return p.parse_args()


def time_reps(comm: MPI.Comm, fn: Callable[[], object], reps: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def setup_gloo(comm: MPI.Comm):  # type: ignore[no-untyped-def]
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_gloo_available():
        return None
    port = comm.bcast(29500 + (os.getpid() % 1000) if comm.rank == 0 else None, root=0)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=comm.rank, world_size=comm.size)
    return torch, dist


def main() -> None:
    args = parse_args()
    hvd.init()
    comm = MPI.COMM_WORLD.Dup()
    n = comm.size
    gloo = None if args.no_torch else setup_gloo(comm)
    names = [s.strip() for s in args.sizes.split(",") if s.strip()]
    rows = []
    for label in names:
        nbytes = SIZES[label]
        count = nbytes // 4
        buf = np.random.default_rng(comm.rank).standard_normal(count).astype(np.float32)
        out = np.empty_like(buf)
        frac = (np.log2(nbytes) - 12) / (np.log2(64 << 20) - 12)
        reps = max(args.min_reps, int(args.max_reps * (1 - frac) + args.min_reps * frac))
        peers = {
            "mpi4py": lambda: comm.Allreduce(buf, out, op=MPI.SUM),
            "hvdcore": lambda: hvd.allreduce(buf, op=hvd.Sum, name=f"bench.{label}", out=out),
        }
        if gloo is not None:
            torch, dist = gloo
            tbuf = torch.from_numpy(buf.copy())
            peers["torch-gloo"] = lambda: dist.all_reduce(tbuf)
        times = {k: statistics.median(time_reps(comm, fn, reps)) for k, fn in peers.items()}
        for peer, t in times.items():
            rows.append({"size": label, "bytes": nbytes, "peer": peer, "median_us": t * 1e6,
                         "busbw_GBps": 2 * (n - 1) / n * nbytes / t / 1e9,
                         "ratio_to_mpi4py": t / times["mpi4py"], "reps": reps})
    # many small tensors: fused (async, submitted together) vs separate blocking calls
    tensors = [np.full((64 << 10) // 4, float(i), np.float32) for i in range(100)]

    def fused() -> None:
        hs = [hvd.allreduce_async(t, op=hvd.Sum, name=f"fused.{i}") for i, t in enumerate(tensors)]
        for h in hs:
            hvd.synchronize(h)

    def grouped() -> None:
        hvd.grouped_allreduce(tensors, op=hvd.Sum, name="grouped")

    def separate() -> None:
        for i, t in enumerate(tensors):
            hvd.allreduce(t, op=hvd.Sum, name=f"sep.{i}")

    def raw_separate() -> None:
        for t in tensors:
            comm.Allreduce(MPI.IN_PLACE, t.copy(), op=MPI.SUM)

    batch = {k: statistics.median(time_reps(comm, fn, 15)) for k, fn in
             {"hvdcore fused (100 async)": fused, "hvdcore grouped (1 call)": grouped,
              "hvdcore 100 blocking calls": separate,
              "mpi4py 100 blocking calls": raw_separate}.items()}
    if comm.rank == 0:
        print(f"\nallreduce, float32, {n} ranks ({MPI.Get_library_version().splitlines()[0]})")
        print(f"{'size':>8} {'peer':>11} {'median us':>11} {'busbw GB/s':>11} {'vs mpi4py':>10}")
        for r in rows:
            print(f"{r['size']:>8} {r['peer']:>11} {r['median_us']:>11.1f} "
                  f"{r['busbw_GBps']:>11.3f} {r['ratio_to_mpi4py']:>9.2f}x")
        base = batch["hvdcore 100 blocking calls"]
        print("\n100 tensors x 64 KiB, float32")
        print(f"{'variant':>28} {'median ms':>10} {'speed-up vs 100 hvdcore calls':>30}")
        for k, t in batch.items():
            print(f"{k:>28} {t * 1e3:>10.2f} {base / t:>29.2f}x")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"ranks": n, "allreduce": rows,
                           "batch_ms": {k: v * 1e3 for k, v in batch.items()}}, fh, indent=2)
    if gloo is not None:
        gloo[1].destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
