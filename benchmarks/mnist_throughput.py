#!/usr/bin/env python3
"""Training throughput of the MNIST example's CNN: plain torch vs hvdcore vs torch DDP.

Every configuration below runs ``--rounds`` times (medians reported, machines are noisy).
``--mode interleaved`` (the default) runs them all in one launch of N ranks, in chunks of
``--chunk`` steps whose order is shuffled every round, so that each configuration sees the
same states of the machine (``mnist_interleaved.py``; the 1-rank ones train on rank 0 while
the other ranks sleep). ``--mode launches`` starts a separate job for each configuration and
round instead (plain ``python`` for torch x1, ``mpirun -np 1`` for hvdcore x1): closer to how
each would run alone, but on a VM the host places the vCPUs anew at each launch, and the
same configuration varied by ~7 % between launches, more than the differences measured.

* ``torch x1``   : plain PyTorch, one process, no communication;
* ``hvdcore x1`` : hvdcore.torch DistributedOptimizer, 1 rank (mpirun -np 1);
* ``hvdcore xN`` : hvdcore.torch, N ranks (default 2);
* ``DDP xN``     : torch.nn.parallel.DistributedDataParallel with the gloo backend, N ranks
  (launched by mpirun too, rendezvous over TCP on localhost);
* ``mpi4py xN``  : plain torch with a hand-written synchronous step over raw mpi4py: the
  gradients copied into one flat buffer, one in-place ``MPI_Allreduce``, averaged and copied
  back. What a careful user would write by hand; any synchronous data-parallel step pays
  its lockstep (each step waits for the slowest rank), which ``solo`` does not;
* ``solo xN``    : N plain-torch processes launched together that never communicate: what the
  machine itself allows N ranks (shared caches, memory bandwidth, a VM's steal time). Its
  efficiency is the ceiling of any data-parallel run here; ``hvdcore vs solo`` is hvdcore's
  own share of the loss.

Every rank trains on its own real MNIST batches of ``--batch-size`` (default 64) with one CPU
thread. Images/s counts all ranks' images. Scaling efficiency of an N-rank run is
``img/s(N ranks) / (N x img/s(torch x1))``; hvdcore's is also given against ``hvdcore x1``.

Usage::

    python benchmarks/mnist_throughput.py                 # table on stdout
    python benchmarks/mnist_throughput.py --json out.json --steps 200 --rounds 3
    python benchmarks/mnist_throughput.py --mode launches   # one job per configuration
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from hvdcore.ports import handoff_port

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------ workers
def _worker(kind: str, steps: int, warmup: int, batch: int, seed: int) -> None:
    import torch
    from mnist_interleaved import train_steps  # (benchmarks/, the script's directory)
    from pytorch_mnist import Net, normalise  # examples/ is on PYTHONPATH (_launch)

    from hvdcore.datasets import mnist

    torch.set_num_threads(1)
    rank, size = 0, 1
    hvd = dist = None
    comm = None
    if kind == "solo":  # one of N independent processes: reports its own rate
        rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    if kind == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
    if kind == "hvdcore":
        import hvdcore.torch as hvd

        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    elif kind == "ddp":
        import torch.distributed as dist

        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        dist.init_process_group("gloo", init_method=os.environ["BENCH_DDP_INIT"], rank=rank,
                                world_size=size)
    torch.manual_seed(seed)
    x, y, _, _ = mnist.load()
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    model = Net()
    opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if hvd is not None:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    if dist is not None:
        model = torch.nn.parallel.DistributedDataParallel(model)
    params = [p for p in model.parameters() if p.requires_grad]
    if comm is not None:
        from handwritten_step import averaging_step  # (benchmarks/, the script's directory)

        for p in params:
            comm.Bcast(p.data.numpy(), root=0)
        reduce_grads = averaging_step(params, comm)

    model.train()
    mine = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(rank))
    batches = [(normalise(x[mine[i * batch:(i + 1) * batch]]), y[mine[i * batch:(i + 1) * batch]])
               for i in range(min(steps + warmup, x.shape[0] // batch))]

    def sync_time(value: float) -> float:
        if hvd is not None:
            return float(hvd.allreduce(torch.tensor([value]), op=hvd.Max, name="bench_time"))
        if dist is not None:
            t = torch.tensor([value])
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t)
        if comm is not None:
            return float(comm.allreduce(value, op=MPI.MAX))
        return value

    def run(n: int) -> float:
        sync_time(0.0)  # start together
        return sync_time(train_steps(model, opt, batches, 0, n,
                                     reduce_grads if comm is not None else None))

    run(warmup)
    elapsed = run(steps)
    if rank == 0 or kind == "solo":
        print("BENCH " + json.dumps({"kind": kind, "ranks": size,
                                     "images_per_sec": steps * batch * size / elapsed}),
              flush=True)
    if hvd is not None:
        hvd.shutdown()
    if dist is not None:
        dist.destroy_process_group()
    if comm is not None:
        comm.Barrier()


# ------------------------------------------------------------------------------- driver
def _env() -> dict[str, str]:
    """The environment of every launch: this checkout, one thread, Open MPI as root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               # this checkout's hvdcore, and the example's model (examples/pytorch_mnist.py)
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "examples"),
                                           env.get("PYTHONPATH", "")]),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none",
               # Oversubscribed nodes: Open MPI's blocking calls must yield the core while
               # they wait instead of spinning (affects MPI users only, i.e. hvdcore, not gloo).
               OMPI_MCA_mpi_yield_when_idle="1",
               BENCH_DDP_INIT=f"tcp://127.0.0.1:{handoff_port()}")
    return env


def _mpirun(ranks: int) -> list[str]:
    return ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none"]


def _launch(kind: str, ranks: int, args: argparse.Namespace) -> float:
    """One job of one configuration (``--mode launches``); its images/s."""
    env = _env()
    worker = [sys.executable, str(Path(__file__).resolve()), "--worker", kind,
              "--steps", str(args.steps), "--warmup", str(args.warmup),
              "--batch-size", str(args.batch_size)]
    cmd = worker if kind == "torch" else [*_mpirun(ranks), *worker]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout,
                          cwd=ROOT)
    rates = [float(json.loads(line[6:])["images_per_sec"])
             for line in proc.stdout.splitlines() if line.startswith("BENCH ")]
    if proc.returncode == 0 and len(rates) == (ranks if kind == "solo" else 1):
        return sum(rates)
    raise RuntimeError(f"{kind} x{ranks} failed (rc {proc.returncode}):\n"
                       f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def _interleaved(args: argparse.Namespace) -> dict[tuple[str, int], list[float]]:
    """Every configuration in one job (``--mode interleaved``); images/s of each round."""
    cmd = [*_mpirun(args.ranks), sys.executable, str(Path(__file__).resolve()),
           "--worker", "interleaved", "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--batch-size", str(args.batch_size), "--rounds", str(args.rounds),
           "--chunk", str(args.chunk)]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=args.timeout * args.rounds)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise RuntimeError(f"the interleaved job ran past {args.timeout * args.rounds:.0f} s:"
                           f"\n{out[-3000:]}\n{err[-3000:]}") from None
    bench = [line for line in out.splitlines() if line.startswith("BENCH ")]
    for line in out.splitlines():
        if line.startswith("round "):
            print(line, file=sys.stderr, flush=True)
    if proc.returncode != 0 or len(bench) != 1:
        raise RuntimeError(f"the interleaved job failed (rc {proc.returncode}):\n"
                           f"{out[-3000:]}\n{err[-3000:]}")
    doc = json.loads(bench[0][6:])
    args.lockstep = doc["lockstep"]
    rates = doc["rates"]
    samples: dict[tuple[str, int], list[float]] = {}
    for label, values in rates.items():
        kind, ranks = label.rsplit("x", 1)
        samples[(kind, int(ranks))] = values
    return samples


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2, help="ranks of the multi-process runs")
    p.add_argument("--steps", type=int, default=600,
                   help="timed steps per run (a few seconds: shorter runs are mostly noise)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    p.add_argument("--batch-size", type=int, default=64, help="batch per rank")
    p.add_argument("--rounds", type=int, default=3, help="interleaved repetitions (median)")
    p.add_argument("--mode", choices=("interleaved", "launches"), default="interleaved",
                   help="all configurations in one job, in shuffled chunks (default), or one "
                   "job per configuration and round")
    p.add_argument("--chunk", type=int, default=100,
                   help="steps per chunk in --mode interleaved (--steps per configuration "
                   "and round, in chunks of this many)")
    p.add_argument("--timeout", type=float, default=900,
                   help="seconds per launch (--mode interleaved: per round)")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--worker", choices=("torch", "hvdcore", "ddp", "solo", "mpi", "interleaved"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker == "interleaved":
        from mnist_interleaved import run  # (benchmarks/, the script's directory)

        run(args.steps, args.warmup, args.batch_size, args.rounds, args.chunk)
        return 0
    if args.worker:
        _worker(args.worker, args.steps, args.warmup, args.batch_size, seed=1)
        return 0
    n = args.ranks
    configs = [("torch", 1), ("hvdcore", 1), ("solo", n), ("mpi", n), ("hvdcore", n),
               ("ddp", n)]
    if args.mode == "interleaved":
        samples = _interleaved(args)
    else:
        samples = {c: [] for c in configs}
        for r in range(args.rounds):
            for kind, ranks in configs:
                samples[(kind, ranks)].append(_launch(kind, ranks, args))
                print(f"round {r + 1}/{args.rounds}: {kind} x{ranks}: "
                      f"{samples[(kind, ranks)][-1]:.1f} img/s", file=sys.stderr, flush=True)
    med = {c: statistics.median(v) for c, v in samples.items()}
    base = med[("torch", 1)]
    names = {"torch": "plain torch", "hvdcore": "hvdcore", "ddp": "torch DDP (gloo)",
             "solo": "independent torch (no communication)",
             "mpi": "hand-written mpi4py step (one fused allreduce)"}
    rows = [f"| config | ranks | images/s (median of {args.rounds}) | images/s per rank | "
            f"scaling efficiency vs torch x1 |", "|---|---|---|---|---|"]
    for kind, ranks in configs:
        v = med[(kind, ranks)]
        eff = f"{v / (ranks * base):.2f}"
        rows.append(f"| {names[kind]} | {ranks} | {v:.1f} | {v / ranks:.1f} | {eff} |")
    hv_eff = med[("hvdcore", n)] / (n * base)
    ddp_eff = med[("ddp", n)] / (n * base)
    hv_self = med[("hvdcore", n)] / (n * med[("hvdcore", 1)])
    ceiling = med[("solo", n)] / (n * base)
    hv_solo = med[("hvdcore", n)] / med[("solo", n)]
    raw_eff = med[("mpi", n)] / (n * base)
    hv_raw = med[("hvdcore", n)] / med[("mpi", n)]
    print("\n".join(rows))
    print(f"\nscaling efficiency at {n} ranks (img/s / ({n} x torch x1)): hvdcore {hv_eff:.2f}, "
          f"DDP {ddp_eff:.2f}; the machine's ceiling ({n} independent processes) {ceiling:.2f}; "
          f"hvdcore vs that ceiling: {hv_solo:.2f}; hvdcore vs its own 1-rank run: "
          f"{hv_self:.2f}; hvdcore / DDP throughput: {med[('hvdcore', n)] / med[('ddp', n)]:.2f}")
    print(f"the hand-written mpi4py step: efficiency {raw_eff:.2f} ({raw_eff / ceiling:.2f} of "
          f"the ceiling); hvdcore / mpi4py throughput: {hv_raw:.2f}")
    lockstep = getattr(args, "lockstep", None)
    if lockstep is not None:
        print(f"lockstep alone (the independent ranks' step times paired step by step, each "
              f"step waiting for the slower): {lockstep:.2f} of the ceiling, so a synchronous "
              f"step whose communication cost nothing would reach ~{lockstep * ceiling:.2f} "
              f"here; hvdcore reaches {hv_solo / lockstep:.2f} of that")
    how = (f"one job, chunks of {min(args.chunk, args.steps)} steps in a shuffled order"
           if args.mode == "interleaved" else "one job per configuration and round")
    print(f"(batch {args.batch_size}/rank, 1 thread/rank, {args.steps} timed steps per round, "
          f"{how}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          "OMPI_MCA_mpi_yield_when_idle=1)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "samples": {f"{k}x{r}": v for (k, r), v in samples.items()},
            "median": {f"{k}x{r}": v for (k, r), v in med.items()},
            "efficiency_hvdcore": hv_eff, "efficiency_ddp": ddp_eff,
            "efficiency_hvdcore_self": hv_self, "efficiency_ceiling": ceiling,
            "hvdcore_vs_ceiling": hv_solo, "efficiency_mpi4py": raw_eff,
            "hvdcore_vs_mpi4py": hv_raw, "ranks": n, "batch_size": args.batch_size,
            "steps": args.steps, "rounds": args.rounds, "mode": args.mode,
            "chunk": args.chunk, "lockstep": lockstep}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
