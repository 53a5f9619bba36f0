"""MNIST training on the Gloo controller: hvdcore's DistributedOptimizer against torch DDP on the
same ranks and the same Gloo, interleaved in one job (issue 62).

Run without MPI::

    hvdcorerun --gloo -np 2 python benchmarks/mnist_gloo_ddp.py
    torchrun --nproc-per-node 2 benchmarks/mnist_gloo_ddp.py --rounds 3

Each rank holds two copies of the MNIST example's CNN from the same weights: one trained with
``hvd.DistributedOptimizer`` (hvdcore's engine on the Gloo controller), one wrapped in
``torch.nn.parallel.DistributedDataParallel`` over the default Gloo group that hvdcore formed.
They train in chunks of ``--chunk`` steps, in an order shuffled anew each round (the same on
every rank), each chunk started together after a barrier, so that load that lands on one lands
on both. Images/s = all ranks' images over the slowest rank's time. Rank 0 prints each round
and then the median over the rounds and the ratio hvdcore / DDP (1.00x = as fast, larger is
faster); the issue's target is >= 1.0x. At the end every rank's copy of each model must be
the same (synchronous training); the exit status is 1 when one differs.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from typing import Any


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--steps", type=int, default=60, help="steps per configuration per round")
    p.add_argument("--chunk", type=int, default=20, help="steps per chunk (default 20)")
    p.add_argument("--batch", type=int, default=64, help="images per rank per step")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps of each first")
    args = p.parse_args()

    import torch
    import torch.distributed as dist
    from mnist_interleaved import train_steps  # (benchmarks/, the script's directory)
    from step_overhead import build, inputs, mnist_copy

    import hvdcore.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    if not hvd.gloo_enabled():
        raise SystemExit("run this on the Gloo controller: hvdcorerun --gloo / torchrun")
    rank, size = hvd.rank(), hvd.size()
    data = inputs("mnist", rank, args.batch, 0, 200)
    torch.manual_seed(1)
    first = build("mnist", 0, 0).state_dict()

    def fresh() -> Any:
        return mnist_copy(first)

    hmodel = fresh()
    hopt = hvd.DistributedOptimizer(torch.optim.SGD(hmodel.parameters(), lr=0.01, momentum=0.9),
                                    named_parameters=hmodel.named_parameters())
    dmodel = torch.nn.parallel.DistributedDataParallel(fresh())
    dopt = torch.optim.SGD(dmodel.parameters(), lr=0.01, momentum=0.9)
    loops = {"hvdcore": (hmodel, hopt), "DDP": (dmodel, dopt)}
    done = {k: 0 for k in loops}
    took_max = torch.zeros(1, dtype=torch.float64)

    def chunk_of(kind: str, n: int) -> float:
        """``n`` steps of ``kind`` started together; images/s of the job."""
        model, opt = loops[kind]
        dist.barrier()
        took = train_steps(model, opt, data, done[kind], n)
        done[kind] += n
        took_max[0] = took
        dist.all_reduce(took_max, op=dist.ReduceOp.MAX)
        return n * args.batch * size / float(took_max[0])

    for kind in loops:
        chunk_of(kind, args.warmup)
    if rank == 0:
        print(f"MNIST on the Gloo controller, {size} ranks, batch {args.batch}/rank, "
              f"{args.rounds} rounds of {args.steps} steps each in chunks of {args.chunk}; "
              f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rates: dict[str, list[float]] = {k: [] for k in loops}
    per_round = max(1, -(-args.steps // args.chunk))
    t_start = time.perf_counter()
    for r in range(args.rounds):
        order = [k for k in loops for _ in range(per_round)]
        random.Random(r).shuffle(order)
        images = {k: 0.0 for k in loops}
        seconds = {k: 0.0 for k in loops}
        for kind in order:
            n = min(args.chunk, args.steps)
            rate = chunk_of(kind, n)
            images[kind] += n * args.batch * size
            seconds[kind] += n * args.batch * size / rate
        for k in loops:
            rates[k].append(images[k] / seconds[k])
        if rank == 0:
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{k} {v[-1]:.0f}" for k, v in rates.items()) + " img/s "
                f"({time.perf_counter() - t_start:.0f} s)", flush=True)
    # synchronous training keeps every rank's copy equal: a checksum of each, from every rank
    sums = [float(sum(v.double().sum() for v in m.state_dict().values()))
            for m in (hmodel, dmodel.module)]
    every = hvd.allgather_object(sums)
    ok = all(s == every[0] for s in every)
    if rank == 0:
        med = {k: statistics.median(v) for k, v in rates.items()}
        print(f"median img/s: hvdcore {med['hvdcore']:.0f}, DDP {med['DDP']:.0f}; "
              f"hvdcore / DDP {med['hvdcore'] / med['DDP']:.3f}x (target >= 1.0x; per round "
              + ", ".join(f"{a / b:.3f}" for a, b in zip(rates['hvdcore'], rates['DDP'],
                                                          strict=True)) + ")", flush=True)
        print(f"after {done['hvdcore']} steps each, every rank's parameters "
              f"{'agree' if ok else 'DIFFER'} (hvdcore and DDP alike)", flush=True)
    hvd.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
