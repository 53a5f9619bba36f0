"""The worker of ``mnist_throughput.py --mode interleaved``: every configuration in one launch.

Run by the driver as ``mpirun -np N python mnist_throughput.py --worker interleaved ...``. Each
rank holds one copy of the MNIST example's CNN per configuration, all starting from the same
weights, and the configurations train in chunks of ``chunk`` steps, in an order shuffled anew
each round (the same order on every rank), so that every configuration sees the same states
of the machine. Separate launches do not: on the 2-vCPU VM the same single-process
configuration ran at 6,831-7,790 img/s from one launch to the next, more than the differences
being measured (the host places a VM's vCPUs differently from one launch to the next).

Configurations (``KINDS``):

* ``torch`` x1 and ``hvdcore`` x1: rank 0 trains alone while the other ranks sleep (polling
  a non-blocking barrier every millisecond, not spinning); hvdcore x1 is its
  DistributedOptimizer over a process set of rank 0 alone, the code path of a 1-rank job;
* ``solo`` xN: every rank trains its own copy, no communication;
* ``mpi`` xN: the hand-written synchronous step (``handwritten_step.averaging_step``);
* ``hvdcore`` xN: ``hvd.DistributedOptimizer``;
* ``ddp`` xN: torch DistributedDataParallel over gloo.

Rank 0 prints one ``BENCH`` line of JSON: per configuration, the images/s of each round (all
ranks' images over the slowest rank's time; ``solo`` sums each rank's own rate), and
``lockstep``: the ``solo`` ranks' step times paired step by step (step i of every rank, the
chunks started together), their mean over the sum of their maxima. That is the share of the
ceiling left to a synchronous step whose communication cost nothing: each step waits for
the slowest rank, and a rank's step time varies (on the VM by 1-1.6 ms around 8 ms, with
one process alone, so not the other rank's doing).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from typing import Any

#: (configuration, ranks it trains on: "one" = rank 0 alone, "all" = every rank)
KINDS = (("torch", "one"), ("hvdcore", "one"), ("solo", "all"), ("mpi", "all"),
         ("hvdcore", "all"), ("ddp", "all"))


def train_steps(model: Any, opt: Any, batches: list[tuple[Any, Any]], start: int, n: int,
                sync: Callable[[], None] | None = None,
                steps_took: list[float] | None = None) -> float:
    """Train ``model`` for ``n`` steps on ``batches`` from index ``start`` (wrapping round);
    ``sync`` runs between backward and the optimizer's step. Returns the seconds they took
    and appends each step's to ``steps_took``."""
    import torch.nn.functional as F

    t0 = t = time.perf_counter()
    for i in range(start, start + n):
        xb, yb = batches[i % len(batches)]
        opt.zero_grad()
        F.nll_loss(model(xb), yb).backward()
        if sync is not None:
            sync()
        opt.step()
        if steps_took is not None:
            now = time.perf_counter()
            steps_took.append(now - t)
            t = now
    return time.perf_counter() - t0


def run(steps: int, warmup: int, batch: int, rounds: int, chunk: int, seed: int = 1) -> None:
    """Train every configuration for ``steps`` timed steps per round (in chunks), print the
    ``BENCH`` line on rank 0."""
    import torch
    import torch.distributed as dist
    from handwritten_step import averaging_step  # (benchmarks/, the script's directory)
    from mpi4py import MPI
    from step_overhead import build, inputs, mnist_copy

    import hvdcore.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    alone = hvd.add_process_set([0])
    dist.init_process_group("gloo", init_method=os.environ["BENCH_DDP_INIT"], rank=rank,
                            world_size=size)
    data = inputs("mnist", rank, batch, 0, 200)
    torch.manual_seed(seed)
    first = build("mnist", 0, 0).state_dict()

    def fresh() -> Any:
        return mnist_copy(first)

    def sgd(model: Any) -> Any:
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    loops: dict[tuple[str, str], Any] = {}
    for kind, who in KINDS:
        model = fresh()
        opt = sgd(model)
        sync = None
        if kind == "hvdcore" and (who == "all" or rank == 0):  # (the set's member only)
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                           process_set=alone if who == "one" else
                                           hvd.global_process_set)
        elif kind == "mpi":
            sync = averaging_step([p for p in model.parameters() if p.requires_grad], comm)
        elif kind == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model)
        loops[(kind, who)] = (model, opt, sync)
    done = {key: 0 for key in KINDS}  # steps each configuration has taken (its next batch)

    def train(key: tuple[str, str], n: int, steps_took: list[float] | None = None) -> float:
        """``n`` steps of configuration ``key`` on this rank; seconds they took."""
        model, opt, sync = loops[key]
        start = done[key]
        done[key] = start + n
        return train_steps(model, opt, data, start, n, sync, steps_took)

    def chunk_of(key: tuple[str, str], n: int) -> float:
        """One chunk, started together; images/s of all the ranks that trained."""
        comm.Barrier()
        if key[1] == "one":
            took = train(key, n) if rank == 0 else 0.0
            idle = comm.Ibarrier()
            if rank == 0:
                idle.Wait()
            else:
                while not idle.Test():  # asleep, not spinning, while rank 0 trains alone
                    time.sleep(0.001)
            return n * batch / took if rank == 0 else 0.0
        if key[0] == "solo":  # independent: each rank's own rate, summed
            mine: list[float] = []
            took = train(key, n, mine)
            every = comm.gather(mine, root=0)
            if rank == 0:  # step i of every rank, paired: what waiting for the slowest costs
                lockstep[0] += sum(sum(t) for t in every) / size
                lockstep[1] += sum(max(ts) for ts in zip(*every, strict=True))
            return comm.allreduce(n * batch / took, op=MPI.SUM)
        took = train(key, n)
        return n * batch * size / comm.allreduce(took, op=MPI.MAX)

    lockstep = [0.0, 0.0]  # solo: mean over ranks of their summed step times; sum of maxima
    for key in KINDS:
        chunk_of(key, warmup)
    lockstep[:] = [0.0, 0.0]
    per_round = max(1, -(-steps // chunk))
    rates: dict[str, list[float]] = {f"{k}x{1 if w == 'one' else size}": [] for k, w in KINDS}
    for r in range(rounds):
        order = [key for key in KINDS for _ in range(per_round)]
        random.Random(r).shuffle(order)  # (the same seed on every rank: the same order)
        images = {key: 0.0 for key in KINDS}
        seconds = {key: 0.0 for key in KINDS}
        for key in order:
            n = min(chunk, steps)
            rate = chunk_of(key, n)
            ranks = 1 if key[1] == "one" else size
            images[key] += n * batch * ranks
            seconds[key] += n * batch * ranks / rate if rate > 0 else 0.0
        for kind, who in KINDS:
            label = f"{kind}x{1 if who == 'one' else size}"
            key = (kind, who)
            rates[label].append(images[key] / seconds[key] if seconds[key] > 0 else 0.0)
        if rank == 0:
            print(f"round {r + 1}/{rounds}: " + ", ".join(
                f"{k} {v[-1]:.0f}" for k, v in rates.items()) + " img/s", flush=True)
    if rank == 0:
        print("BENCH " + json.dumps({"ranks": size, "rates": rates,
                                     "lockstep": lockstep[0] / lockstep[1]}), flush=True)
    hvd.shutdown()
    dist.destroy_process_group()
