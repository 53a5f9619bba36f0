"""Keras MNIST on Keras 3's torch (or JAX) backend with hvdcore vs plain torch DDP (or solo Keras).

One ``mpirun -np 2`` launch (the driver below starts it), interleaved: every rank holds both
models, starting from the same weights, and the configurations train in chunks of ``--chunk``
steps, in an order shuffled anew each round (the same order on every rank), so both see the
same states of the machine. Configurations:

* ``keras_hvd``: the CNN of ``examples/keras_mnist.py`` (``KERAS_BACKEND=torch``), Adadelta
  wrapped in ``hvdcore.keras.DistributedOptimizer``, one ``train_on_batch`` per step (Keras'
  own torch train step; the gradients reduced by ``hvdcore.torch.grouped_allreduce``);
* ``keras_solo``: the same Keras model and step without hvdcore (each rank alone: Keras' cost
  without communication);
* ``ddp``: the same layers written in torch (``torch.nn``), ``torch.optim.Adadelta``, wrapped in
  ``DistributedDataParallel`` over gloo.

Every rank trains ``--batch-size`` real MNIST images per step from its own shard; a chunk's
time is barrier to barrier, the slowest rank's; images/s count both ranks' images (``solo``:
the same formula, no communication). Rank 0 prints one table: per configuration the median
images/s over the rounds, and ``keras_hvd / ddp`` and ``keras_hvd / keras_solo`` (medians of
the per-round ratios).

``--backend jax`` runs the same with ``KERAS_BACKEND=jax`` (``keras_hvd``: Keras' jitted JAX
train step, the gradients handed to the core's host allreduce by an ``io_callback``) and
reports ``keras_hvd / keras_solo`` only: JAX has no multi-process data parallelism of its own
on CPU to compare with (its ``jax.distributed`` + ``pmap``/sharding targets accelerators, and
Keras' ``keras.distribution.DataParallel`` shards over the devices of one process), so there
is no ``ddp`` row for JAX.

Run::

    python benchmarks/keras_torch_ddp.py [--backend torch|jax] [--rounds 8] [--chunk 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from chunks import chunked_parser, interleaved_rates, ratios, run, worker_args

from hvdcore.ports import handoff_port

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ("keras_hvd", "keras_solo", "ddp")
KERAS_ONLY = ("keras_hvd", "keras_solo")  # --backend jax: no framework DP peer


def _configs(backend: str) -> tuple[str, ...]:
    return CONFIGS if backend == "torch" else KERAS_ONLY


def _driver(args: argparse.Namespace) -> int:
    env = dict(os.environ, KERAS_BACKEND=args.backend, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
               PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    cmd = [shutil.which("mpirun") or "mpirun", "-np", str(args.np), "--oversubscribe",
           sys.executable, __file__, *worker_args(args), f"--backend={args.backend}"]
    return subprocess.run(cmd, env=env, timeout=args.timeout).returncode


def _torch_cnn(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, 10))


def _worker(args: argparse.Namespace) -> None:
    import keras
    import numpy as np
    from mpi4py import MPI

    import hvdcore.keras as hvd
    from hvdcore.datasets import mnist

    comm = MPI.COMM_WORLD
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    configs = _configs(args.backend)
    if "ddp" in configs:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
        port = comm.bcast(handoff_port() if rank == 0 else None, root=0)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size)

    x_train, y_train, _, _ = mnist.load(None)
    x = (x_train[rank::size].astype(np.float32) / 255.0)[..., None]
    y = y_train[rank::size].astype(np.int64)
    b = args.batch_size
    batches = len(x) // b

    import importlib.util  # the example's model, loaded by path (no sys.path edit)

    spec = importlib.util.spec_from_file_location("keras_mnist", ROOT / "examples" /
                                                  "keras_mnist.py")
    example = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = example  # its dataclass looks its module up there
    spec.loader.exec_module(example)  # type: ignore[union-attr]
    build_model = example.build_model

    def keras_model(distributed: bool):
        keras.utils.set_random_seed(1234)
        model = build_model()
        opt = keras.optimizers.Adadelta(1.0 * size)
        if distributed:
            opt = hvd.DistributedOptimizer(opt)
        model.compile(loss="sparse_categorical_crossentropy", optimizer=opt)
        return model

    models = {"keras_hvd": keras_model(True), "keras_solo": keras_model(False)}
    if "ddp" in configs:
        torch.manual_seed(1234)
        net = torch.nn.parallel.DistributedDataParallel(_torch_cnn(torch))
        torch_opt = torch.optim.Adadelta(net.parameters(), lr=1.0 * size)
        loss_fn = torch.nn.CrossEntropyLoss()
    cursor = {c: 0 for c in configs}

    def step(config: str) -> None:
        k = cursor[config] % batches
        cursor[config] += 1
        xb, yb = x[k * b:(k + 1) * b], y[k * b:(k + 1) * b]
        if config == "ddp":
            torch_opt.zero_grad()
            loss = loss_fn(net(torch.from_numpy(xb).permute(0, 3, 1, 2)), torch.from_numpy(yb))
            loss.backward()
            torch_opt.step()
        else:
            models[config].train_on_batch(xb, yb)

    rates = interleaved_rates(comm, configs, step, warmup=args.warmup, rounds=args.rounds,
                              chunk=args.chunk, items_per_step=size * b)
    same = hvd.allgather_object([np.asarray(w).ravel()[:8].tolist()
                                 for w in models["keras_hvd"].get_weights()])
    in_sync = all(s == same[0] for s in same)
    if rank == 0:
        _report(args, size, rates, in_sync)
    if "ddp" in configs:
        dist.destroy_process_group()


def _report(args, size: int, rates: dict[str, list[float]], in_sync: bool) -> None:
    print(f"\nKeras MNIST CNN, KERAS_BACKEND={args.backend}, {size} ranks, batch {args.batch_size} per rank, "
          f"{args.rounds} rounds x {args.chunk} steps per configuration (interleaved); "
          f"keras_hvd weights identical on every rank: {in_sync}\n")
    print("| configuration | images/s (median) | min | max |")
    print("|---|---|---|---|")
    for c in rates:
        print(f"| {c} | {statistics.median(rates[c]):.0f} | {min(rates[c]):.0f} | "
              f"{max(rates[c]):.0f} |")
    summary: dict[str, float] = {}
    for a, b in (("keras_hvd", "ddp"), ("keras_hvd", "keras_solo"), ("keras_solo", "ddp")):
        if a not in rates or b not in rates:
            continue
        r = ratios(rates, a, b)
        summary[f"{a}/{b}"] = statistics.median(r)
        print(f"| {a} / {b} | {statistics.median(r):.3f} | {min(r):.3f} | {max(r):.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "ranks": size, "rates": rates,
                       "median_ratios": summary, "weights_identical": in_sync}, f, indent=1)


def main() -> None:
    p = chunked_parser(__doc__.split("\n\n")[0], rounds=8, chunk=20,
                       chunk_help="steps per chunk", batch_size=64,
                       batch_help="images per rank and step", warmup=5,
                       warmup_help="untimed steps per configuration")
    p.add_argument("--backend", choices=("torch", "jax"), default="torch",
                   help="Keras backend (jax: no ddp row, see above)")
    run(p.parse_args(), _worker, _driver)

if __name__ == "__main__":
    main()
