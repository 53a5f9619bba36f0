#!/usr/bin/env python3
"""What hvdcore's DistributedOptimizer adds to a training step, against a hand-written step.

Run under MPI (2 or more ranks)::

    mpirun -np 2 python benchmarks/step_overhead.py                    # the MNIST example's CNN
    mpirun -np 2 python benchmarks/step_overhead.py --model mlp --layers 100   # 200 gradients
    mpirun -np 2 python benchmarks/step_overhead.py --json out.json

Each rank holds two identical copies of the model, one behind ``hvd.DistributedOptimizer``
and one with a hand-written synchronous step over raw mpi4py (every gradient copied into one
flat buffer, one in-place ``MPI_Allreduce``, averaged, copied back: the best a careful user
writes by hand). The two train in alternating chunks of ``--chunk`` steps, in the same
processes, so both see the same machine state; separate launches (``mnist_throughput.py``)
differ by several per cent from run to run on a noisy VM, which hides a difference this size.

Per step and per phase (mean and median over all steps; mean is what throughput sees):
``forward+backward`` (hvdcore's gradient hooks run inside it), ``gradient sync``
(``opt.synchronize()`` against the hand-written reduction; both include waiting for the
slower rank) and ``optimizer step``. The last line gives hvdcore's cost per step in
microseconds and per cent of the hand-written step.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def _example() -> Any:
    """examples/pytorch_mnist.py as a module (its model and input normalisation)."""
    spec = importlib.util.spec_from_file_location("pytorch_mnist",
                                                  ROOT / "examples" / "pytorch_mnist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(kind: str, layers: int, width: int) -> Any:
    """The model: the MNIST example's CNN, or an MLP of ``layers`` Linear(width, width)."""
    import torch

    if kind == "mnist":
        return _example().Net()
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])


def mnist_copy(state: dict) -> Any:
    """A new copy of the MNIST example's CNN with the weights ``state``, in training mode."""
    model = build("mnist", 0, 0)
    model.load_state_dict(state)
    model.train()
    return model


def inputs(kind: str, rank: int, batch: int, width: int, count: int) -> list[tuple[Any, Any]]:
    """``count`` batches of this rank: real MNIST images for the CNN, random rows otherwise."""
    import torch

    if kind == "mnist":
        from hvdcore.datasets import mnist

        normalise = _example().normalise
        x, y, _, _ = mnist.load()
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        mine = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(rank))
        return [(normalise(x[mine[i * batch:(i + 1) * batch]]), y[mine[i * batch:(i + 1) * batch]])
                for i in range(count)]
    g = torch.Generator().manual_seed(rank)
    return [(torch.randn(batch, width, generator=g), torch.randint(0, width, (batch,), generator=g))
            for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("mnist", "mlp"), default="mnist",
                   help="the MNIST example's CNN (8 gradients) or an MLP (2 x --layers)")
    p.add_argument("--layers", type=int, default=100, help="Linear layers of the MLP")
    p.add_argument("--width", type=int, default=32, help="the MLP's layer width")
    p.add_argument("--batch-size", type=int, default=64, help="batch per rank")
    p.add_argument("--chunk", type=int, default=100, help="steps per chunk")
    p.add_argument("--rounds", type=int, default=8,
                   help="chunks of each loop, alternating which goes first")
    p.add_argument("--warmup", type=int, default=30, help="untimed steps of each loop first")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from handwritten_step import averaging_step  # (benchmarks/, the script's directory)
    from mpi4py import MPI

    import hvdcore.torch as hvd

    torch.set_num_threads(1)
    hvd.init()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    data = inputs(args.model, rank, args.batch_size, args.width, 200)
    torch.manual_seed(1)
    m_hvd = build(args.model, args.layers, args.width)
    m_raw = build(args.model, args.layers, args.width)
    m_raw.load_state_dict(m_hvd.state_dict())
    opt_hvd = hvd.DistributedOptimizer(
        torch.optim.SGD(m_hvd.parameters(), lr=0.01, momentum=0.9),
        named_parameters=m_hvd.named_parameters())
    opt_raw = torch.optim.SGD(m_raw.parameters(), lr=0.01, momentum=0.9)
    params = [q for q in m_raw.parameters() if q.requires_grad]
    raw_sync = averaging_step(params, comm)

    def loss_of(model: Any, xb: Any, yb: Any) -> Any:
        out = model(xb)
        return F.nll_loss(out, yb) if args.model == "mnist" else F.cross_entropy(out, yb)

    phases = ("forward+backward", "gradient sync", "optimizer step")
    recs: dict[str, dict[str, list[float]]] = {
        k: {ph: [] for ph in (*phases, "chunk")} for k in ("hvdcore", "mpi4py")}

    def chunk(kind: str, start: int, n: int, rec: dict[str, list[float]] | None) -> None:
        model, opt = (m_hvd, opt_hvd) if kind == "hvdcore" else (m_raw, opt_raw)
        comm.Barrier()
        t0 = time.perf_counter()
        for i in range(start, start + n):
            xb, yb = data[i % len(data)]
            torch.manual_seed(i)  # both copies draw the same dropout masks at step i
            a = time.perf_counter()
            opt.zero_grad()
            loss_of(model, xb, yb).backward()
            b = time.perf_counter()
            if kind == "hvdcore":
                opt_hvd.synchronize()
                c = time.perf_counter()
                with opt_hvd.skip_synchronize():
                    opt_hvd.step()
            else:
                raw_sync()
                c = time.perf_counter()
                opt_raw.step()
            d = time.perf_counter()
            if rec is not None:
                for ph, dt in zip(phases, (b - a, c - b, d - c), strict=True):
                    rec[ph].append(dt)
        if rec is not None:
            rec["chunk"].append((time.perf_counter() - t0) / n)

    for kind in ("hvdcore", "mpi4py"):
        chunk(kind, 0, args.warmup, None)
    for r in range(args.rounds):
        order = ("hvdcore", "mpi4py") if r % 2 == 0 else ("mpi4py", "hvdcore")
        for kind in order:
            chunk(kind, r * args.chunk, args.chunk, recs[kind])
        if rank == 0:
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{k} {recs[k]['chunk'][-1] * 1e6:.0f} us/step" for k in order),
                file=sys.stderr, flush=True)
    # both copies took the same steps on the same data: they must agree (a wrong peer is no peer)
    with torch.no_grad():
        diff = max(float((a - b).abs().max())
                   for a, b in zip(m_hvd.parameters(), m_raw.parameters(), strict=True))
    ngrads = len(params)
    if rank == 0:
        us = 1e6
        print(f"step overhead: {args.model}"
              + (f" ({args.layers} x Linear({args.width}, {args.width}))"
                 if args.model == "mlp" else "")
              + f", {ngrads} gradient tensors, {size} ranks, batch {args.batch_size}/rank, "
              f"{args.rounds} x {args.chunk} steps each, load average {os.getloadavg()[0]:.1f}")
        print(f"{'loop':>8} {'us/step':>9} {'chunks':>13}  " + "  ".join(
            f"{ph + ' mean/median':>28}" for ph in phases))
        for k, rec in recs.items():
            ch = rec["chunk"]
            print(f"{k:>8} {statistics.median(ch) * us:>9.0f} "
                  f"{min(ch) * us:>6.0f}-{max(ch) * us:<6.0f} " + "  ".join(
                      f"{statistics.mean(rec[ph]) * us:>19.0f} / {statistics.median(rec[ph]) * us:<6.0f}"
                      for ph in phases))
        h, r_ = (statistics.median(recs[k]["chunk"]) for k in ("hvdcore", "mpi4py"))
        print(f"hvdcore adds {(h - r_) * us:.0f} us per step ({(h / r_ - 1) * 100:+.1f} % of the "
              f"hand-written step; per phase, by mean: " + ", ".join(
                  f"{ph} {(statistics.mean(recs['hvdcore'][ph]) - statistics.mean(recs['mpi4py'][ph])) * us:+.0f} us"
                  for ph in phases) + f"); largest parameter difference between the two copies {diff:.1e}")
        if args.json:
            Path(args.json).write_text(json.dumps({
                "model": args.model, "gradients": ngrads, "ranks": size, "loops": list(recs),
                "per_step_us": {k: statistics.median(v["chunk"]) * us for k, v in recs.items()},
                "phases_mean_us": {k: {ph: statistics.mean(v[ph]) * us for ph in phases}
                                   for k, v in recs.items()},
                "overhead_fraction": h / r_ - 1, "max_param_diff": diff}, indent=2))
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
