#!/usr/bin/env python3
"""Synthetic ResNet training throughput with hvdcore.torch (Horovod's synthetic benchmark, redone).

Every rank trains a ResNet defined in this file (bottleneck residual blocks; ``--model resnet50``
is ResNet-50: 25,557,032 parameters at 1000 classes) on one fixed random batch, with
``hvd.DistributedOptimizer`` averaging the gradients. Nothing is read or downloaded, so the
figure is the compute + gradient-exchange rate of the stack alone, comparable across sites.

Run::

    hvdcorerun -np 2 python examples/pytorch_synthetic_benchmark.py           # ResNet-50, 224 px
    mpirun -np 2 python examples/pytorch_synthetic_benchmark.py --model tiny --image-size 32 \\
        --batch-size 4 --num-warmup-batches 1 --num-batches-per-iter 2 --num-iters 3   # seconds

Measurement: ``--num-warmup-batches`` steps are left out; then ``--num-iters`` iterations of
``--num-batches-per-iter`` steps are timed, each starting on a barrier (GPU work synchronised
before the clock stops). Each rank's rate in an iteration is ``batch * batches / seconds``;
the total of an iteration is the sum over ranks. Means are given with a 95 % confidence
interval over iterations (``1.96 * std``, as Horovod prints it).

Output (rank 0; parsed by ``checks/hvdcore_synthetic.py``)::

    hvdcore-synthetic-iter: iter=0 images_per_sec_per_rank=12.3 total_images_per_sec=24.5
    hvdcore-synthetic-rank: rank=1 images_per_sec=12.2 conf=0.4
    hvdcore-synthetic: framework=torch model=resnet50 parameters=25557032 ranks=2 device=cpu batch_size=32 image_size=224 timed_steps=100 timed_seconds=261.2 images_per_sec_per_rank=12.3 images_per_sec_per_rank_conf=0.3 total_images_per_sec=24.5 total_images_per_sec_conf=0.6
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F

import hvdcore.torch as hvd

#: Bottleneck blocks per stage of each preset (ResNet-50/101/152 as published; ``resnet26``
#: and ``tiny`` are smaller members of the same family for quick runs).
PRESETS: dict[str, tuple[int, ...]] = {
    "resnet152": (3, 8, 36, 3),
    "resnet101": (3, 4, 23, 3),
    "resnet50": (3, 4, 6, 3),
    "resnet26": (2, 2, 2, 2),
    "tiny": (1, 1, 1, 1),
}
EXPANSION = 4


class Bottleneck(torch.nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand; identity or projected shortcut."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * EXPANSION
        self.conv1 = torch.nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(width)
        self.conv2 = torch.nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(width)
        self.conv3 = torch.nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = torch.nn.BatchNorm2d(cout)
        self.shortcut: torch.nn.Module = torch.nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = torch.nn.Sequential(
                torch.nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                torch.nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.shortcut(x))


class ResNet(torch.nn.Module):
    """ResNet v1.5 of bottleneck blocks: ``blocks`` per stage, stage widths ``width * 2**i``."""

    def __init__(self, blocks: Sequence[int], width: int = 64, num_classes: int = 1000) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
            torch.nn.BatchNorm2d(width), torch.nn.ReLU(inplace=True),
            torch.nn.MaxPool2d(3, stride=2, padding=1))
        layers: list[torch.nn.Module] = []
        cin = width
        for stage, n in enumerate(blocks):
            w = width * 2 ** stage
            for i in range(n):
                layers.append(Bottleneck(cin, w, 2 if (i == 0 and stage > 0) else 1))
                cin = w * EXPANSION
        self.stages = torch.nn.Sequential(*layers)
        self.fc = torch.nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Synthetic ResNet training benchmark (images/s per rank and in total) with "
                    "hvdcore.torch. Defaults are Horovod's: ResNet-50, 224 px, batch 32, "
                    "10 warm-up steps, 10 iterations of 10 steps. For a quick CPU run: "
                    "--model tiny --width 8 --image-size 32 --batch-size 4 "
                    "--num-warmup-batches 1 --num-batches-per-iter 2 --num-iters 3.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", choices=sorted(PRESETS), default="resnet50",
                   help="depth: bottleneck blocks per stage of a ResNet preset")
    p.add_argument("--width", type=int, default=64,
                   help="channels of the stem and first stage (64: the published ResNets)")
    p.add_argument("--num-classes", type=int, default=1000, help="classifier outputs")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank per step")
    p.add_argument("--image-size", type=int, default=224, help="square image side in pixels")
    p.add_argument("--num-warmup-batches", type=int, default=10,
                   help="steps before timing starts (allocator, caches, cuDNN autotuning)")
    p.add_argument("--num-batches-per-iter", type=int, default=10, help="steps per iteration")
    p.add_argument("--num-iters", type=int, default=10, help="timed iterations")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (per rank)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads per rank (0: cores / ranks on this node); give runs "
                        "you compare the same value")
    p.add_argument("--no-cuda", action="store_true",
                   help="train on the CPU even where a GPU is visible")
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="compress gradients to float16 for the allreduce")
    p.add_argument("--seed", type=int, default=42, help="random seed (model and data)")
    args = p.parse_args(argv)
    for name in ("batch_size", "image_size", "num_batches_per_iter", "num_iters", "width"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.num_warmup_batches < 0:
        p.error("--num-warmup-batches must not be negative")
    return args


def mean_conf(values: Sequence[float]) -> tuple[float, float]:
    """Mean and 95 % confidence half-width (1.96 std; 0 for a single value)."""
    mean = statistics.fmean(values)
    return mean, (1.96 * statistics.stdev(values) if len(values) > 1 else 0.0)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    hvd.init()
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    if torch.cuda.is_available() and not args.no_cuda:
        torch.cuda.set_device(hvd.local_rank())  # one GPU per rank on the node
        device = torch.device("cuda", hvd.local_rank())
        torch.backends.cudnn.benchmark = True
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    torch.set_num_threads(threads)

    model = ResNet(PRESETS[args.model], args.width, args.num_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, args.num_classes, (args.batch_size,), device=device)

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    params = sum(p.numel() for p in model.parameters())
    rank, size = hvd.rank(), hvd.size()
    if rank == 0:
        print(f"model {args.model} (width {args.width}, {params} parameters), batch "
              f"{args.batch_size} x {args.image_size} px per rank, {size} rank(s), device "
              f"{device}, {threads} thread(s)/rank", flush=True)
    for _ in range(args.num_warmup_batches):
        step()
    sync()

    rates, seconds = [], []
    for it in range(args.num_iters):
        hvd.barrier()
        t0 = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            step()
        sync()
        dt = time.perf_counter() - t0
        seconds.append(dt)
        rates.append(args.batch_size * args.num_batches_per_iter / dt)
        if rank == 0:
            print(f"Iter #{it}: {rates[-1]:.1f} img/sec on rank 0", flush=True)

    # Every rank's rates per iteration, in rank order, to rank 0.
    all_rates: list[list[float]] = hvd.allgather_object(rates)
    all_seconds: list[list[float]] = hvd.allgather_object(seconds)
    if rank == 0:
        totals = [sum(r[i] for r in all_rates) for i in range(args.num_iters)]
        for i, total in enumerate(totals):
            print(f"hvdcore-synthetic-iter: iter={i} images_per_sec_per_rank={total / size:.2f} "
                  f"total_images_per_sec={total:.2f}")
        for r, per_rank in enumerate(all_rates):
            mean, conf = mean_conf(per_rank)
            print(f"hvdcore-synthetic-rank: rank={r} images_per_sec={mean:.2f} conf={conf:.2f}")
        total, total_conf = mean_conf(totals)
        window = sum(max(s[i] for s in all_seconds) for i in range(args.num_iters))
        print(f"Img/sec per rank: {total / size:.1f} +-{total_conf / size:.1f}")
        print(f"Total img/sec on {size} rank(s): {total:.1f} +-{total_conf:.1f}")
        print(f"hvdcore-synthetic: framework=torch model={args.model} parameters={params} "
              f"ranks={size} device={device.type} batch_size={args.batch_size} "
              f"image_size={args.image_size} "
              f"timed_steps={args.num_iters * args.num_batches_per_iter} "
              f"timed_seconds={window:.3f} images_per_sec_per_rank={total / size:.2f} "
              f"images_per_sec_per_rank_conf={total_conf / size:.2f} "
              f"total_images_per_sec={total:.2f} total_images_per_sec_conf={total_conf:.2f}",
              flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
