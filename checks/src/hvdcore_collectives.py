"""Correctness and performance of hvdcore's collectives on the ranks of one job.

Run under any launcher (``mpirun -np N``, ``srun --mpi=pmix``, ``hvdcorerun``)::

    python3 hvdcore_collectives.py [--sizes 1,1000,262144] [--bw-bytes 8388608] [--reps 30]

Correctness: allreduce (sum, average, min, max), allgather (ragged first dimension), broadcast,
alltoall (uneven splits) and reducescatter (sum, uneven rows) at each size and for float32,
float64 and int32, each result compared with a NumPy reference that every rank computes for all
ranks' inputs (inputs are deterministic functions of rank and size). Failures are counted on each
rank and summed, so rank 0 reports the whole job.

Performance, hvdcore against raw mpi4py ``Allreduce`` on the same ranks in the same job, timed
in interleaved rounds (ABBA order) so that both see the same machine noise (rank 0 prints; a
round's time is the slowest rank's, a figure the median over rounds): allreduce bus bandwidth
(``2 (n-1)/n * bytes / time``, ``--reps`` rounds of one call each) at ``--bw-bytes``, and
small-message latency (1-element float32 allreduce, ``--latency-reps`` calls of each in rounds
of 20), plus their ratios, each the median over rounds of the round's ratio (busbw_ratio below
1 and latency_ratio above 1 are hvdcore's overhead). Output lines, parsed by checks/hvdcore_collectives.py::

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


def paired_rounds(ours, peer, reps: int, block: int = 1) -> list[tuple[float, float]]:
    """This rank's median call time of ``ours()`` and of ``peer()`` in each of ``reps`` rounds.

    One warm-up call of each; then ``reps`` rounds of ``block`` calls of each side, the order
    alternating ABBA (ours first in even rounds, the peer first in odd ones), every call starting
    on a barrier. A burst of load lands on both sides of a round, and neither side always runs
    right after the other, so the ratio of a round's two times is stable where absolute times
    are not.
    """
    ours()
    peer()
    rounds: list[tuple[float, float]] = []
    for i in range(reps):
        times: dict[str, float] = {}
        order = (("ours", ours), ("peer", peer))
        for side, fn in order if i % 2 == 0 else order[::-1]:
            times[side] = statistics.median(_timed(fn) for _ in range(block))
        rounds.append((times["ours"], times["peer"]))
    return rounds


def measure(bw_bytes: int, reps: int, latency_reps: int) -> dict[str, float]:
    """hvdcore vs raw mpi4py ``Allreduce`` on the same ranks: bandwidth and latency.

    hvdcore is timed as users call it (``hvd.allreduce(x, name=...)``: a new result, a named,
    repeated tensor as an optimizer submits); raw mpi4py as a tuned program would
    (``Allreduce`` into a preallocated buffer). A round's time of a side is the slowest rank's;
    the absolute figures are the medians over rounds, the ratios the medians over rounds of
    each round's ratio (the MNIST check's rule: ``checks/hvdcore_checks/interleave.py``).
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    big = np.ones(max(1, bw_bytes // 4), dtype=np.float32)
    big_out = np.empty_like(big)
    big_rounds = paired_rounds(
        lambda: hvd.allreduce(big, op=hvd.Sum, name="collectives.bw"),
        lambda: comm.Allreduce(big, big_out, op=MPI.SUM), reps)
    small = np.ones(1, dtype=np.float32)
    small_out = np.empty_like(small)
    small_rounds = paired_rounds(
        lambda: hvd.allreduce(small, op=hvd.Sum, name="collectives.latency"),
        lambda: comm.Allreduce(small, small_out, op=MPI.SUM),
        max(1, latency_reps // 20), block=20)
    # Every rank must agree on the figures reported: each round's slowest rank.
    mine = np.array(big_rounds + small_rounds, dtype=np.float64)
    worst = hvd.allreduce(mine, op=hvd.Max, name="collectives.times")
    big_w, small_w = worst[:len(big_rounds)], worst[len(big_rounds):]
    n = hvd.size()
    factor = 2 * (n - 1) / n if n > 1 else 1.0
    t_big, t_big_raw = (statistics.median(big_w[:, k]) for k in (0, 1))
    return {"busbw": big.nbytes / t_big / 1e9 * factor,
            "busbw_raw": big.nbytes / t_big_raw / 1e9 * factor, "bytes": big.nbytes,
            "latency_us": statistics.median(small_w[:, 0]) * 1e6,
            "latency_raw_us": statistics.median(small_w[:, 1]) * 1e6,
            "busbw_ratio": statistics.median(big_w[:, 1] / big_w[:, 0]),
            "latency_ratio": statistics.median(small_w[:, 0] / small_w[:, 1])}


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
        print(f"{PREFIX} busbw_ratio={perf['busbw_ratio']:.4f} "
              f"latency_ratio={perf['latency_ratio']:.4f}", flush=True)
    hvd.shutdown()
    return 1 if totals[1] else 0


if __name__ == "__main__":
    sys.exit(main())
