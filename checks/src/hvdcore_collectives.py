"""Correctness and performance of hvdcore's collectives on the ranks of one job.

Run under any launcher (``mpirun -np N``, ``srun --mpi=pmix``, ``hvdcorerun``)::

    python3 hvdcore_collectives.py [--sizes 1,1000,262144] [--bw-bytes 8388608] [--reps 30]

Correctness: allreduce (sum, average, min, max), allgather (ragged first dimension), broadcast,
alltoall (uneven splits) and reducescatter (sum, uneven rows) at each size and for float32,
float64 and int32, each result compared with a NumPy reference that every rank computes for all
ranks' inputs (inputs are deterministic functions of rank and size). Failures are counted on each
rank and summed, so rank 0 reports the whole job.

Performance, hvdcore against raw mpi4py ``Allreduce`` on the same ranks in the same job, timed
interleaved so that both see the same machine noise (rank 0 prints; every figure is the slowest
rank's median): allreduce bus bandwidth (``2 (n-1)/n * bytes / time``, ``--reps`` calls of each)
at ``--bw-bytes``, and small-message latency (1-element float32 allreduce, ``--latency-reps``
calls of each), plus their ratios (hvdcore / raw: busbw_ratio below 1 and latency_ratio above
1 are hvdcore's overhead). Output lines, parsed by checks/hvdcore_collectives.py::

    hvdcore-collectives: rank=<r> size=<n> done
    hvdcore-collectives: checks=<total> failed=<failed> ranks=<n>
    hvdcore-collectives: busbw_GBps=<float> bytes=<int> latency_us=<float>
    hvdcore-collectives: raw_busbw_GBps=<float> raw_latency_us=<float>
    hvdcore-collectives: busbw_ratio=<float> latency_ratio=<float>
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import hvdcore as hvd

DTYPES = (np.float32, np.float64, np.int32)
PREFIX = "hvdcore-collectives:"


def rank_input(rank: int, count: int, dtype: type, salt: int = 0) -> np.ndarray:
    """Rank ``rank``'s deterministic input: small integers, exact in every dtype."""
    base = (np.arange(count, dtype=np.int64) * 7 + rank * 13 + salt) % 97 - 48
    return base.astype(dtype)


def close(got: np.ndarray, want: np.ndarray) -> bool:
    """Same shape, dtype and values (float tolerance for averages)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if np.issubdtype(want.dtype, np.floating):
        return bool(np.allclose(got, want, rtol=1e-5, atol=1e-5))
    return bool(np.array_equal(got, want))


class Checker:
    """Counts checks and failures; prints each failure with rank, op, dtype and size."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.total = 0
        self.failed = 0

    def expect(self, op: str, dtype: type, count: int, got: np.ndarray, want: np.ndarray) -> None:
        self.total += 1
        if not close(np.asarray(got), want):
            self.failed += 1
            print(f"{PREFIX} FAIL rank={self.rank} op={op} dtype={np.dtype(dtype).name} "
                  f"count={count}: got shape {np.shape(got)} {np.asarray(got).ravel()[:4]}, "
                  f"want shape {want.shape} {want.ravel()[:4]}", flush=True)


def check_all(sizes: list[int], chk: Checker) -> None:
    rank, n = hvd.rank(), hvd.size()
    for count in sizes:
        for dtype in DTYPES:
            inputs = [rank_input(r, count, dtype) for r in range(n)]
            stacked = np.stack(inputs).astype(np.float64)
            for opname, op, ref in (
                ("allreduce-sum", hvd.Sum, stacked.sum(0)),
                ("allreduce-min", hvd.Min, stacked.min(0)),
                ("allreduce-max", hvd.Max, stacked.max(0)),
            ):
                got = hvd.allreduce(inputs[rank], op=op, name=f"{opname}.{count}.{dtype.__name__}")
                chk.expect(opname, dtype, count, got, ref.astype(dtype))
            if np.issubdtype(dtype, np.floating):
                got = hvd.allreduce(inputs[rank], op=hvd.Average)
                chk.expect("allreduce-average", dtype, count, got, (stacked.sum(0) / n).astype(dtype))

            # allgather: rank r contributes r+1 rows of `count` elements (ragged first dim).
            rows = [rank_input(r, (r + 1) * count, dtype, salt=1).reshape(r + 1, count)
                    for r in range(n)]
            got = hvd.allgather(rows[rank])
            chk.expect("allgather", dtype, count, got, np.concatenate(rows))

            root = n - 1
            got = hvd.broadcast(inputs[rank], root_rank=root)
            chk.expect("broadcast", dtype, count, got, inputs[root])

            # alltoall: sender s sends (s + d) % 3 + 1 rows of `count` elements to rank d.
            def splits_of(s: int) -> list[int]:
                return [(s + d) % 3 + 1 for d in range(n)]

            sends = [rank_input(s, sum(splits_of(s)) * max(count, 1), dtype, salt=2)
                     .reshape(sum(splits_of(s)), max(count, 1)) for s in range(n)]
            want_parts = []
            for s in range(n):
                off = sum(splits_of(s)[:rank])
                want_parts.append(sends[s][off:off + splits_of(s)[rank]])
            out, received = hvd.alltoall(sends[rank], splits=np.array(splits_of(rank)))
            chk.expect("alltoall", dtype, count, out, np.concatenate(want_parts))
            chk.expect("alltoall-splits", np.int32, count,
                       np.asarray(received).astype(np.int32),
                       np.array([splits_of(s)[rank] for s in range(n)], dtype=np.int32))

            # reducescatter (sum): 2n+1 rows, the first (2n+1) % n ranks get one extra row.
            nrows = 2 * n + 1
            mats = [rank_input(r, nrows * max(count, 1), dtype, salt=3)
                    .reshape(nrows, max(count, 1)) for r in range(n)]
            total = np.stack(mats).astype(np.float64).sum(0).astype(dtype)
            per = [nrows // n + (1 if r < nrows % n else 0) for r in range(n)]
            start = sum(per[:rank])
            got = hvd.reducescatter(mats[rank], op=hvd.Sum)
            chk.expect("reducescatter-sum", dtype, count, got, total[start:start + per[rank]])


def _timed(fn) -> float:
    hvd.barrier()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def paired_medians(ours, peer, reps: int, block: int = 1) -> tuple[float, float]:
    """Median per-call time of ``ours()`` and ``peer()``, measured interleaved.

    One warm-up call of each; then ``reps`` rounds, each timing ``block`` calls of ``ours``
    then ``block`` calls of ``peer``, every call starting on a barrier. Interleaving exposes
    both to the same machine noise, so their ratio is stable where their absolute times are not.
    """
    ours()
    peer()
    t_ours: list[float] = []
    t_peer: list[float] = []
    for _ in range(reps):
        t_ours += [_timed(ours) for _ in range(block)]
        t_peer += [_timed(peer) for _ in range(block)]
    return statistics.median(t_ours), statistics.median(t_peer)


def measure(bw_bytes: int, reps: int, latency_reps: int) -> dict[str, float]:
    """hvdcore vs raw mpi4py ``Allreduce`` on the same ranks: bandwidth and latency.

    hvdcore is timed as users call it (``hvd.allreduce(x, name=...)``: a new result, a named,
    repeated tensor as an optimizer submits); raw mpi4py as a tuned program would
    (``Allreduce`` into a preallocated buffer). Every rank reports its medians; the slowest
    rank's are used.
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    big = np.ones(max(1, bw_bytes // 4), dtype=np.float32)
    big_out = np.empty_like(big)
    t_big, t_big_raw = paired_medians(
        lambda: hvd.allreduce(big, op=hvd.Sum, name="collectives.bw"),
        lambda: comm.Allreduce(big, big_out, op=MPI.SUM), reps)
    small = np.ones(1, dtype=np.float32)
    small_out = np.empty_like(small)
    t_small, t_small_raw = paired_medians(
        lambda: hvd.allreduce(small, op=hvd.Sum, name="collectives.latency"),
        lambda: comm.Allreduce(small, small_out, op=MPI.SUM),
        max(1, latency_reps // 20), block=20)
    # Every rank must agree on the figures reported: take the slowest rank's medians.
    worst = hvd.allreduce(np.array([t_big, t_big_raw, t_small, t_small_raw]), op=hvd.Max,
                          name="collectives.times")
    n = hvd.size()
    factor = 2 * (n - 1) / n if n > 1 else 1.0
    busbw, busbw_raw = (big.nbytes / t / 1e9 * factor for t in worst[:2])
    return {"busbw": busbw, "busbw_raw": busbw_raw, "bytes": big.nbytes,
            "latency_us": worst[2] * 1e6, "latency_raw_us": worst[3] * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,1000,65536",
                        help="element counts to check (comma-separated)")
    parser.add_argument("--bw-bytes", type=int, default=8 * 2**20,
                        help="message size of the bandwidth measurement")
    parser.add_argument("--reps", type=int, default=30,
                        help="timed allreduces of --bw-bytes (each of hvdcore and raw mpi4py)")
    parser.add_argument("--latency-reps", type=int, default=400,
                        help="timed 1-element allreduces (each of hvdcore and raw mpi4py)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]

    hvd.init()
    rank, n = hvd.rank(), hvd.size()
    chk = Checker(rank)
    check_all(sizes, chk)
    totals = hvd.allreduce(np.array([chk.total, chk.failed], dtype=np.int64), op=hvd.Sum,
                           name="collectives.totals")

    perf = measure(args.bw_bytes, args.reps, args.latency_reps)

    print(f"{PREFIX} rank={rank} size={n} done", flush=True)
    hvd.barrier()
    if rank == 0:
        print(f"{PREFIX} checks={int(totals[0])} failed={int(totals[1])} ranks={n}", flush=True)
        print(f"{PREFIX} busbw_GBps={perf['busbw']:.4f} bytes={perf['bytes']} "
              f"latency_us={perf['latency_us']:.2f}", flush=True)
        print(f"{PREFIX} raw_busbw_GBps={perf['busbw_raw']:.4f} "
              f"raw_latency_us={perf['latency_raw_us']:.2f}", flush=True)
        print(f"{PREFIX} busbw_ratio={perf['busbw'] / perf['busbw_raw']:.4f} "
              f"latency_ratio={perf['latency_us'] / perf['latency_raw_us']:.4f}", flush=True)
    hvd.shutdown()
    return 1 if totals[1] else 0


if __name__ == "__main__":
    sys.exit(main())
