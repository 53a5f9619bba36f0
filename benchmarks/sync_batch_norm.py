"""What synchronized batch normalization costs a Keras 3 training step on torch or JAX.

One ``mpirun -np N`` launch (the driver below starts it), interleaved: every rank holds three
copies of a small CNN with three normalization layers (after each convolution and the hidden
dense layer), starting from the same weights, and they train in chunks of ``--chunk`` steps, in
an order shuffled anew each round (the same order on every rank), so all see the same states of
the machine:

* ``sync``: ``hvd.SyncBatchNormalization`` layers and ``hvd.DistributedOptimizer`` (per step and
  layer one Sum allreduce of the batch moments, and one of their gradients);
* ``raw_sync``: the same layers with the moments' Sum allreduce (forward and gradient) made by
  raw mpi4py ``Allreduce`` instead of hvdcore (torch: an autograd function; JAX: an ordered
  ``io_callback`` under ``custom_vjp``), gradients still by ``hvd.DistributedOptimizer``: the
  floor of the same synchronization points;
* ``local``: Keras' ``BatchNormalization`` (each rank's own statistics) and
  ``hvd.DistributedOptimizer``: the same step without the statistics' allreduces;
* ``solo``: Keras' ``BatchNormalization`` and the plain optimizer (no communication at all).

Every rank trains ``--batch-size`` synthetic 28x28 images per step (seeded per rank); a chunk's
time is barrier to barrier, the slowest rank's. Rank 0 prints per configuration the median
images/s (both ranks' images) and the per-round ratios ``sync / raw_sync`` (hvdcore's layer
against the raw floor), ``sync / local`` (what the synchronized statistics cost) and
``local / solo`` (what the gradient reduction costs), and whether each
configuration's weights and moving statistics are identical on every rank afterwards (``sync``
and ``raw_sync`` must be; ``local``'s moving statistics are each rank's own).

There is no framework peer on CPU: torch's ``nn.SyncBatchNorm`` runs on GPUs only, and Keras'
``synchronized=True`` is ``tf.distribute``'s.

Run::

    python benchmarks/sync_batch_norm.py [--backend torch|jax] [--rounds 6] [--chunk 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

from chunks import chunked_parser, interleaved_rates, ratios, run, worker_args

CONFIGS = ("sync", "raw_sync", "local", "solo")


def _driver(args: argparse.Namespace) -> int:
    env = dict(os.environ, KERAS_BACKEND=args.backend, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = [shutil.which("mpirun") or "mpirun", "-np", str(args.np), "--oversubscribe",
           sys.executable, os.path.abspath(__file__), *worker_args(args), f"--backend={args.backend}"]
    proc = subprocess.run(cmd, env=env, timeout=args.timeout)
    if proc.returncode:
        print(f"sync_batch_norm.py: the launch exited {proc.returncode}: {' '.join(cmd)}",
              file=sys.stderr)
    return proc.returncode


def _model(keras, norm, distributed: bool, hvd, size: int):
    keras.utils.set_random_seed(1234)
    layers = keras.layers
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(16, 3), norm(), layers.ReLU(),
        layers.Conv2D(32, 3), norm(), layers.ReLU(), layers.MaxPooling2D(2),
        layers.Flatten(), layers.Dense(64), norm(), layers.ReLU(),
        layers.Dense(10, activation="softmax"),
    ])
    opt = keras.optimizers.SGD(0.01 * size, momentum=0.9)
    if distributed:
        opt = hvd.DistributedOptimizer(opt)
    model.compile(loss="sparse_categorical_crossentropy", optimizer=opt)
    return model


def _raw_sum(backend: str, comm):
    """``x -> x`` summed over the ranks by raw mpi4py, differentiable, on ``backend``."""
    import numpy as np
    from mpi4py import MPI

    def host_sum(a):
        buf = np.array(a, copy=True)
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return buf

    if backend == "torch":
        import torch

        class RawSum(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return torch.from_numpy(host_sum(x.detach().cpu().numpy())).to(x.device)

            @staticmethod
            def backward(ctx, g):
                return torch.from_numpy(host_sum(g.detach().cpu().numpy())).to(g.device)

        return RawSum.apply
    import jax
    from jax.experimental import io_callback

    def callback(x):
        return io_callback(host_sum, jax.ShapeDtypeStruct(x.shape, x.dtype), x, ordered=True)

    @jax.custom_vjp
    def raw_sum(x):
        return callback(x)

    raw_sum.defvjp(lambda x: (callback(x), None), lambda _, g: (callback(g),))
    return raw_sum


def _raw_sync_layer(keras, raw_sum, size: int):
    """Keras' BatchNormalization with the job's moments by raw mpi4py (Horovod's arithmetic)."""
    ops = keras.ops

    class RawSyncBatchNormalization(keras.layers.BatchNormalization):
        def _moments(self, inputs, mask):
            mean, variance = super()._moments(inputs, mask)
            summed = raw_sum(ops.stack([mean, variance + ops.square(mean)])) / size
            group_mean, mean_of_square = ops.unstack(summed)
            return group_mean, mean_of_square - ops.square(group_mean)

    return RawSyncBatchNormalization


def _worker(args: argparse.Namespace) -> None:
    import keras
    import numpy as np
    from mpi4py import MPI

    import hvdcore.keras as hvd

    comm = MPI.COMM_WORLD
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    models = {
        "sync": _model(keras, hvd.SyncBatchNormalization, True, hvd, size),
        "raw_sync": _model(keras, _raw_sync_layer(keras, _raw_sum(args.backend, comm), size),
                           True, hvd, size),
        "local": _model(keras, keras.layers.BatchNormalization, True, hvd, size),
        "solo": _model(keras, keras.layers.BatchNormalization, False, hvd, size),
    }
    gen = np.random.RandomState(100 + rank)
    b, batches = args.batch_size, 8
    x = gen.randn(batches * b, 28, 28, 1).astype(np.float32)
    y = gen.randint(0, 10, batches * b).astype(np.int64)
    cursor = dict.fromkeys(CONFIGS, 0)

    def step(config: str) -> None:
        k = cursor[config] % batches
        cursor[config] += 1
        models[config].train_on_batch(x[k * b:(k + 1) * b], y[k * b:(k + 1) * b])

    def progress(r: int) -> None:
        if rank == 0:
            print(f"sync_batch_norm: round {r}/{args.rounds} done", flush=True)

    rates = interleaved_rates(comm, CONFIGS, step, warmup=args.warmup, rounds=args.rounds,
                              chunk=args.chunk, items_per_step=size * b, progress=progress)
    identical = {}
    for config in CONFIGS:
        mine = [np.asarray(keras.ops.convert_to_numpy(w)) for w in models[config].weights]
        everyone = hvd.allgather_object([w.ravel().tolist() for w in mine])
        identical[config] = all(np.allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
                                for other in everyone for a, b in zip(other, everyone[0],
                                                                      strict=True))
    if rank == 0:
        _report(args, size, rates, identical)


def _report(args: argparse.Namespace, size: int, rates: dict[str, list[float]],
            identical: dict[str, bool]) -> None:
    print(f"\nSynchronized batch normalization, KERAS_BACKEND={args.backend}, {size} ranks, "
          f"batch {args.batch_size} per rank, {args.rounds} rounds x {args.chunk} steps per "
          f"configuration (interleaved), 3 normalization layers\n")
    print("| configuration | images/s (median) | min | max | weights and moving statistics "
          "identical on every rank |")
    print("|---|---|---|---|---|")
    for c in CONFIGS:
        print(f"| {c} | {statistics.median(rates[c]):.0f} | {min(rates[c]):.0f} | "
              f"{max(rates[c]):.0f} | {identical[c]} |")
    summary = {}
    for a, b in (("sync", "raw_sync"), ("sync", "local"), ("local", "solo"), ("sync", "solo")):
        r = ratios(rates, a, b)
        summary[f"{a}/{b}"] = statistics.median(r)
        print(f"| {a} / {b} | {statistics.median(r):.3f} | {min(r):.3f} | {max(r):.3f} | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "ranks": size, "rates": rates,
                       "median_ratios": summary, "identical": identical}, f, indent=1)


def main() -> None:
    p = chunked_parser(__doc__.split("\n\n")[0], rounds=6, chunk=10,
                       chunk_help="steps per chunk", batch_size=32,
                       batch_help="images per rank and step", warmup=3,
                       warmup_help="untimed steps per configuration")
    p.add_argument("--backend", choices=("torch", "jax"), default="torch",
                   help="Keras backend (default torch)")
    run(p.parse_args(), _worker, _driver)

if __name__ == "__main__":
    main()
