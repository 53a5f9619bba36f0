#!/usr/bin/env python3
"""The MNIST training of ``pytorch_mnist.py`` with torch DistributedDataParallel: hvdcore's peer.

The ReFrame scaling check runs this right after the hvdcore example, on the same ranks of the
same job, and judges hvdcore's images/s against it (``ddp_ratio``). Everything that decides the
figure is the same as in ``pytorch_mnist.py``: the CNN (imported from it), the data shards,
batch size per rank, threads per rank, SGD with momentum, the steps left out as warm-up and the
timing (barrier to barrier, slowest rank). Only the gradient exchange differs: DDP's bucketed
allreduce over ``gloo`` (CPU) or ``nccl`` (CUDA), ``--backend`` to choose.

Launch it like any MPI program (``mpirun -np 2 python pytorch_mnist_ddp.py``, ``srun``):
mpi4py only provides the rank, size and the address of rank 0's key-value store (its host, or
127.0.0.1 when every rank runs on one host, and the port it opened); torch.distributed does the
rest.

Output (rank 0)::

    ddp-mnist: backend=gloo ranks=2 test_accuracy=0.9012 images_per_sec=8812.3 images_per_sec_per_rank=4406.2 timed_steps=290 timed_seconds=4.213
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from mpi4py import MPI
from pytorch_mnist import Net, normalise  # the example next to this script (sys.path[0])

from hvdcore.datasets import mnist


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=64, help="batch size per rank")
    p.add_argument("--lr", type=float, default=0.01,
                   help="single-process learning rate (scaled by the number of ranks)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--steps", type=int, default=300,
                   help="optimizer steps per rank (the shard is reused when it runs out)")
    p.add_argument("--timing-warmup-steps", type=int, default=10,
                   help="optimizer steps left out of the throughput measurement")
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads per rank (0: cores / ranks on this node)")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="torch.distributed backend (auto: nccl with CUDA, else gloo)")
    p.add_argument("--data", default=None, help="mnist.npz or directory of IDX files")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds the rendezvous may take before failing")
    return p.parse_args(argv)


def rendezvous(comm: MPI.Comm, timeout: timedelta) -> dist.TCPStore:
    """torch.distributed's key-value store, served by rank 0 on a port it holds from the start.

    Rank 0 opens the store on a port the kernel picks and keeps it open; the other ranks learn
    the address over MPI (loopback when every rank shares a host). Probing for a free port and
    handing its number to the store would leave a window in which another process can take it.
    """
    host = socket.gethostname()
    hosts = comm.allgather(host)
    address = "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]
    store = None
    if comm.rank == 0:
        store = dist.TCPStore(address, 0, comm.size, is_master=True, timeout=timeout,
                              wait_for_workers=False)
    port = comm.bcast(store.port if store is not None else None, root=0)
    if store is None:
        store = dist.TCPStore(address, port, comm.size, is_master=False, timeout=timeout)
    return store


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    local_size = comm.Split_type(MPI.COMM_TYPE_SHARED).size
    cuda = torch.cuda.is_available() and args.backend != "gloo"
    backend = ("nccl" if cuda else "gloo") if args.backend == "auto" else args.backend
    device = torch.device("cpu")
    if cuda:
        local_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).rank
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    threads = args.threads or max(1, (os.cpu_count() or 1) // local_size)
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    timeout = timedelta(seconds=args.timeout)
    try:
        store = rendezvous(comm, timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=size,
                                timeout=timeout)
    except Exception as exc:
        raise RuntimeError(f"rank {rank}: torch.distributed rendezvous ({backend}) failed: "
                           f"{exc}") from exc

    x_train, y_train, x_test, y_test = (torch.from_numpy(a) for a in mnist.load(args.data))
    model = torch.nn.parallel.DistributedDataParallel(Net().to(device))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum)
    g = torch.Generator().manual_seed(args.seed)
    mine = torch.randperm(x_train.shape[0], generator=g)[rank::size]
    steps = args.steps
    span = mine.numel() - args.batch_size + 1
    if rank == 0:
        print(f"ddp MNIST: {size} rank(s), backend {backend}, {steps} steps of "
              f"{args.batch_size} images per rank, {threads} thread(s)/rank, device {device}",
              flush=True)

    model.train()
    t0, timed = None, 0
    for step in range(steps):
        if t0 is None and step >= args.timing_warmup_steps:
            dist.barrier()
            t0 = time.perf_counter()
        if t0 is not None:
            timed += 1
        first = (step * args.batch_size) % span
        idx = mine[first:first + args.batch_size]
        xb, yb = normalise(x_train[idx]).to(device), y_train[idx].to(device)
        opt.zero_grad()
        F.nll_loss(model(xb), yb).backward()
        opt.step()
    if cuda:
        torch.cuda.synchronize(device)
    dist.barrier()
    seconds = time.perf_counter() - t0 if t0 is not None else 0.0
    slowest = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    seconds = float(slowest)

    model.eval()
    with torch.no_grad():
        chunk = torch.arange(rank, x_test.shape[0], size)
        out = model.module(normalise(x_test[chunk]).to(device))
        score = torch.tensor([float((out.argmax(1).cpu() == y_test[chunk]).sum()),
                              float(chunk.numel())], dtype=torch.float64)
    dist.all_reduce(score)
    ips = timed * args.batch_size * size / seconds if seconds else 0.0
    if rank == 0:
        print(f"ddp-mnist: backend={backend} ranks={size} "
              f"test_accuracy={float(score[0] / score[1]):.4f} images_per_sec={ips:.1f} "
              f"images_per_sec_per_rank={ips / size:.1f} timed_steps={timed} "
              f"timed_seconds={seconds:.3f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
