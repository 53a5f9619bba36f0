#!/usr/bin/env python3
"""Elastic data-parallel MNIST with hvdcore.torch (Horovod's elastic API), on MNIST read offline.

Run it elastically: workers may fail or join while it trains, and the job goes on::

    hvdcorerun --min-np 1 --max-np 4 --host-discovery-script ./hosts.sh \\
        python examples/pytorch_mnist_elastic.py --epochs 2

or as a fixed job (``hvdcorerun -np 2 ...``, ``mpirun``, ``srun``): then ``hvd.elastic.run``
runs the training once and a failure ends the job as usual.

What makes it elastic (Horovod's recipe):

1. the model, the optimizer, the ``ElasticSampler`` and the epoch live in one
   ``hvd.elastic.TorchState``;
2. the training function is decorated with ``@hvd.elastic.run``;
3. ``state.commit()`` every ``--batches-per-commit`` batches: the point a failure rolls back to
   (a commit copies the model and optimizer state in memory: see ``--batches-per-commit``);
4. a reset callback rescales the learning rate to the job's new size.

Output: per-epoch lines from rank 0 (``processed=``: the distinct samples the epoch trained,
the ``ElasticSampler``'s record), ``reset`` lines when the job changes (with the step and the
samples processed that the job rolled back to), then::

    hvdcore-mnist-elastic: ranks=2 epochs=2 test_accuracy=0.9712 resets=1 steps=1140 \
        resumed_after_s=4.21

``resumed_after_s``: seconds from a rank's death under ``--fail-at-step`` (the time it wrote
into its marker) to the end of rank 0's first step after the reset (``nan`` without one).

``--fail-at-step N`` (testing): the worker with rank 1 kills itself (SIGKILL) after step N, once
per job (a marker file in ``--work-dir``), to show a rank dying mid-training.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from pytorch_mnist import Net, evaluate, normalise  # the fixed-size example beside this one

import hvdcore.torch as hvd
from hvdcore.datasets import mnist


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.01, help="single-rank learning rate "
                   "(scaled by the job's size after every reset)")
    p.add_argument("--batches-per-commit", type=int, default=20,
                   help="commit every N batches: more often costs a state copy each time, "
                        "less often redoes more work after a failure")
    p.add_argument("--train-samples", type=int, default=0,
                   help="use only the first N training images (0: all 60000)")
    p.add_argument("--data", default=None, help="mnist.npz or directory of IDX files")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--fail-at-step", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--work-dir", default=".", help="where --fail-at-step leaves its marker")
    return p.parse_args(argv)


def _resumed_after(marker: Path, resumed_at: float) -> float:
    """Seconds from the death time in ``marker`` to ``resumed_at`` (nan without either)."""
    try:
        return resumed_at - float(marker.read_text())
    except (OSError, ValueError):
        return float("nan")


def processed(sampler: hvd.elastic.ElasticSampler) -> int:
    """The distinct samples of the epoch processed so far: the sampler counts whole batches on
    every rank, the last one's padding too."""
    return min(sampler.processed_num, len(sampler.dataset))


def main(argv: list[str] | None = None,
         report: Callable[[dict[str, Any]], None] | None = None,
         result: dict[str, Any] | None = None) -> int:
    """Train; ``report`` gets rank 0's figures after each epoch, ``result`` (filled on every
    rank) the final ones: how ``ray_pytorch_mnist_elastic.py`` runs it in Ray workers."""
    args = parse_args(argv)
    hvd.init()
    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    x_train, y_train, x_test, y_test = (torch.from_numpy(a) for a in mnist.load(args.data))
    if args.train_samples:
        x_train, y_train = x_train[:args.train_samples], y_train[:args.train_samples]
    model = Net()
    base = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.5)
    optimizer = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(range(len(x_train)), shuffle=True, seed=1)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, steps=0)
    resets = [0]  # this process's count (the state holds only what every rank agrees on)
    resumed = {"pending": False, "at": float("nan")}  # end of the first step after a reset
    marker = Path(args.work_dir) / ".pytorch_mnist_elastic.failed"

    def on_reset() -> None:
        resets[0] += 1
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        resumed["pending"] = True
        # Fault injection (the ReFrame check's proof that a slow recovery fails it): a reset
        # this many seconds slower.
        time.sleep(float(os.environ.get("FAULTS_ELASTIC_RESET_DELAY_S", "0")))
        if hvd.rank() == 0:
            print(f"reset {resets[0]}: {hvd.size()} rank(s) from epoch {state.epoch}, "
                  f"{len(state.sampler)} samples of this epoch left per rank, "
                  f"steps={state.steps} processed={processed(state.sampler)}",
                  flush=True)

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        while state.epoch < args.epochs:
            model.train()
            order = list(state.sampler)
            for b, start in enumerate(range(0, len(order), args.batch_size)):
                idx = torch.tensor(order[start:start + args.batch_size])
                optimizer.zero_grad()
                loss = F.nll_loss(model(normalise(x_train[idx])), y_train[idx].long())
                loss.backward()
                optimizer.step()
                state.steps += 1
                if resumed["pending"]:
                    resumed["pending"], resumed["at"] = False, time.time()
                state.sampler.record_batch(b, args.batch_size)
                if (args.fail_at_step and state.steps == args.fail_at_step and hvd.rank() == 1
                        and not marker.exists()):
                    marker.write_text(f"{time.time():.6f}\n")  # the death time
                    os.kill(os.getpid(), signal.SIGKILL)
                if b % args.batches_per_commit == 0:
                    state.commit()
            _, acc = evaluate(model, x_test, y_test, torch.device("cpu"))
            if hvd.rank() == 0:
                print(f"epoch {state.epoch}: ranks={hvd.size()} test_accuracy={acc:.4f} "
                      f"steps={state.steps} "
                      f"processed={processed(state.sampler)}", flush=True)
                if report is not None:
                    report({"epoch": state.epoch, "ranks": hvd.size(), "test_accuracy": acc,
                            "steps": state.steps})
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    train(state)
    _, acc = evaluate(model, x_test, y_test, torch.device("cpu"))
    if hvd.rank() == 0:
        print(f"hvdcore-mnist-elastic: ranks={hvd.size()} epochs={args.epochs} "
              f"test_accuracy={acc:.4f} resets={resets[0]} steps={state.steps} "
              f"resumed_after_s={_resumed_after(marker, resumed['at']):.3f}", flush=True)
    if result is not None:
        result.update(rank=hvd.rank(), size=hvd.size(), epochs=args.epochs, test_accuracy=acc,
                      resets=resets[0], steps=state.steps)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
