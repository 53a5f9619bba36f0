"""What a Spark user pays for ``hvdcore.spark.run`` against Spark's own way of running torch
jobs, ``pyspark.ml.torch.distributor.TorchDistributor`` (torchrun in barrier tasks, raw
``torch.distributed`` on Gloo), on the same local Spark, interleaved.

Each call runs a function that forms the job (``hvd.init()`` / ``init_process_group("gloo")``),
allreduces a 1 MiB float32 tensor ``--calls`` times (the sum checked against its value) and
returns rank 0's time for those calls. Two rows per size: the whole call as the driver sees it
(Spark job, process start, imports, rendezvous, the collectives) and the collectives alone.
Medians over ``--rounds``; ratio = hvdcore's time over TorchDistributor's (< 1: hvdcore is
faster)::

    python benchmarks/spark_launch.py                 # sizes 1-3, 3 rounds, ~3 min on 2 cores
    python benchmarks/spark_launch.py --sizes 2 --rounds 1

TorchDistributor needs pandas and pyarrow besides PySpark (``pip install pandas pyarrow``). A
TorchDistributor call that raises is reported and left out of the medians.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time

MIB = 1 << 18  # float32 elements in 1 MiB


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 3], help="ranks per job")
    p.add_argument("--rounds", type=int, default=3, help="calls of each per size (default 3)")
    p.add_argument("--calls", type=int, default=20, help="allreduces per job (default 20)")
    p.add_argument("--slots", type=int, default=3, help="Spark's local[N] (default 3)")
    return p.parse_args()


def hvdcore_job(calls: int) -> float:
    import torch

    import hvdcore.torch as hvd

    hvd.init()
    x = torch.ones(MIB)
    hvd.allreduce(x, op=hvd.Sum)  # warm-up
    t0 = time.perf_counter()
    for _ in range(calls):
        y = hvd.allreduce(x, op=hvd.Sum)
    seconds = time.perf_counter() - t0
    assert float(y[0]) == hvd.size()
    hvd.shutdown()
    return seconds


def ddp_job(calls: int) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    x = torch.ones(MIB)
    dist.all_reduce(x.clone())  # warm-up
    t0 = time.perf_counter()
    for _ in range(calls):
        y = x.clone()
        dist.all_reduce(y)
    seconds = time.perf_counter() - t0
    assert float(y[0]) == dist.get_world_size()
    dist.destroy_process_group()
    return seconds


def main() -> None:
    args = parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    import hvdcore.spark

    spark = (SparkSession.builder.master(f"local[{args.slots}]").appName("spark_launch")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    load = os.getloadavg()[0]
    print(f"spark_launch: local[{args.slots}], sizes {args.sizes}, {args.rounds} round(s), "
          f"{args.calls} x 1 MiB allreduce per job; load {load:.1f} on {os.cpu_count()} CPUs",
          flush=True)
    rows = []
    failed: list[str] = []  # TorchDistributor calls that raised (not timed)
    try:
        for n in args.sizes:
            ours: list[tuple[float, float]] = []
            theirs: list[tuple[float, float]] = []
            for r in range(args.rounds):
                for name in (("hvdcore", "torch") if r % 2 == 0 else ("torch", "hvdcore")):
                    t0 = time.perf_counter()
                    if name == "hvdcore":
                        inner = hvdcore.spark.run(hvdcore_job, args=(args.calls,), num_proc=n,
                                                  stdout=io.StringIO(), stderr=io.StringIO())[0]
                        ours.append((time.perf_counter() - t0, inner))
                    else:
                        try:
                            inner = TorchDistributor(num_processes=n, local_mode=False,
                                                     use_gpu=False).run(ddp_job, args.calls)
                            theirs.append((time.perf_counter() - t0, inner))
                        except Exception as exc:  # noqa: BLE001 - counted, the rest go on
                            failed.append(f"size {n} round {r + 1}: {type(exc).__name__}")
                print(f"  size {n} round {r + 1}: hvdcore {ours[-1][0]:.2f} s, "
                      f"TorchDistributor {theirs[-1][0] if theirs else float('nan'):.2f} s",
                      flush=True)
            rows.append((n, ours, theirs))
    finally:
        spark.stop()
    print(f"\n{'ranks':>5} {'what':<22} {'hvdcore':>10} {'TorchDistr.':>12} {'ratio':>6}")
    for n, ours, theirs in rows:
        if not theirs:
            print(f"{n:>5} (every TorchDistributor call failed)")
            continue
        for i, what, unit, scale in ((0, "whole call", "s", 1.0),
                                     (1, f"{args.calls} allreduces", "ms", 1e3)):
            a = statistics.median(x[i] for x in ours) * scale
            b = statistics.median(x[i] for x in theirs) * scale
            print(f"{n:>5} {what:<22} {a:>8.2f}{unit:<2} {b:>10.2f}{unit:<2} {a / b:>6.2f}")
    print(f"\nload after: {os.getloadavg()[0]:.1f}; TorchDistributor calls that failed: "
          f"{', '.join(failed) or 'none'}")


if __name__ == "__main__":
    main()
