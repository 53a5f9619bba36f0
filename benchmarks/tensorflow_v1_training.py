"""What hvdcore's TF1 ``DistributedOptimizer`` costs a ``session.run`` training step.

One ``mpirun -np N`` launch (the driver below starts it), interleaved: every rank builds one
``tf.compat.v1`` graph and Session per configuration, the same MLP (784-256-256-10, momentum
SGD, the same initial weights everywhere), and they train in chunks of ``--chunk`` runs of the
training op, in an order shuffled anew each round (the same order on every rank), so all see the
same states of the machine:

* ``hvdcore``: ``hvd.DistributedOptimizer(opt)``, what a Horovod TF1 script runs (one grouped
  allreduce of the gradients per run);
* ``raw``: the plain optimizer on gradients averaged by raw mpi4py: one ``tf.numpy_function``
  that packs every gradient into one buffer and calls ``Allreduce`` (the floor of one fused
  reduction per run);
* ``hvdcore_passes4``: ``backward_passes_per_step=4`` (gradients summed in the graph, one
  reduction and one update per four runs);
* ``solo``: the plain optimizer, no communication.

Every rank trains ``--batch-size`` synthetic 28x28 inputs per run (seeded per rank); a chunk's
time is barrier to barrier, the slowest rank's. Rank 0 prints per configuration the median
samples/s (all ranks' samples) and the per-round ratios ``hvdcore / raw`` (hvdcore's TF1 path
against the floor), ``hvdcore / solo`` and ``hvdcore_passes4 / solo`` (what the reduction costs,
every run and every fourth), and whether each configuration's weights are identical on every
rank afterwards (all but ``solo`` must be).

Run::

    python benchmarks/tensorflow_v1_training.py [--np 2] [--rounds 6] [--chunk 20]
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

CONFIGS = ("hvdcore", "raw", "hvdcore_passes4", "solo")
WIDTHS = (784, 256, 256, 10)


def _driver(args: argparse.Namespace) -> int:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [shutil.which("mpirun") or "mpirun", "-np", str(args.np), "--oversubscribe",
           sys.executable, os.path.abspath(__file__), *worker_args(args)]
    proc = subprocess.run(cmd, env=env, timeout=args.timeout)
    if proc.returncode:
        print(f"tensorflow_v1_training.py: the launch exited {proc.returncode}: "
              f"{' '.join(cmd)}", file=sys.stderr)
    return proc.returncode


def _raw_average(comm, size: int):
    """Gradients -> their average over the ranks, by one raw mpi4py Allreduce."""
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI

    def host(*grads):
        flat = np.concatenate([g.ravel() for g in grads])
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        flat /= size
        out, at = [], 0
        for g in grads:
            out.append(flat[at:at + g.size].reshape(g.shape))
            at += g.size
        return out

    def average(grads):
        outs = tf.numpy_function(host, grads, [g.dtype for g in grads], stateful=True)
        return [tf.ensure_shape(o, g.shape) for o, g in zip(outs, grads, strict=True)]

    return average


def _session(config: str, hvd, comm, size: int, lr: float):
    """A graph and Session of ``config``: (session, train op, inputs x, labels y, weights)."""
    import numpy as np
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, WIDTHS[0]])
        y = v1.placeholder(tf.int64, [None])
        init = np.random.RandomState(1234)  # (the same on every rank)
        h, weights = x, []
        for i, (a, b) in enumerate(zip(WIDTHS, WIDTHS[1:], strict=False)):
            w = v1.get_variable(f"w{i}", initializer=(init.randn(a, b) / np.sqrt(a)).astype(
                np.float32))
            bias = v1.get_variable(f"b{i}", initializer=np.zeros(b, np.float32))
            weights += [w, bias]
            h = tf.matmul(h, w) + bias
            if i < len(WIDTHS) - 2:
                h = tf.nn.relu(h)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                             logits=h))
        opt = v1.train.MomentumOptimizer(lr, 0.9)
        if config == "hvdcore":
            train = hvd.DistributedOptimizer(opt).minimize(loss)
        elif config == "hvdcore_passes4":
            train = hvd.DistributedOptimizer(opt, backward_passes_per_step=4,
                                             average_aggregated_gradients=True).minimize(loss)
        elif config == "raw":
            pairs = opt.compute_gradients(loss)
            averaged = _raw_average(comm, size)([g for g, _ in pairs])
            train = opt.apply_gradients(list(zip(averaged, [v for _, v in pairs],
                                                 strict=True)))
        else:
            train = opt.minimize(loss)
        sess = v1.Session(graph=graph)
        sess.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
    return sess, train, x, y, weights


def _worker(args: argparse.Namespace) -> None:
    import numpy as np
    from mpi4py import MPI

    import hvdcore.tensorflow as hvd

    comm = MPI.COMM_WORLD
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    sessions = {c: _session(c, hvd, comm, size, 0.01) for c in CONFIGS}
    gen = np.random.RandomState(100 + rank)
    b, batches = args.batch_size, 8
    xs = gen.randn(batches * b, WIDTHS[0]).astype(np.float32)
    ys = gen.randint(0, 10, batches * b).astype(np.int64)
    cursor = dict.fromkeys(CONFIGS, 0)

    def step(config: str) -> None:
        sess, train, x, y, _ = sessions[config]
        k = cursor[config] % batches
        cursor[config] += 1
        sess.run(train, feed_dict={x: xs[k * b:(k + 1) * b], y: ys[k * b:(k + 1) * b]})

    def progress(r: int) -> None:
        if rank == 0:
            print(f"tensorflow_v1_training: round {r}/{args.rounds} done", flush=True)

    # (a chunk of a multiple of 4 runs ends every window of hvdcore_passes4)
    chunk = max(4, args.chunk - args.chunk % 4)
    rates = interleaved_rates(comm, CONFIGS, step, warmup=4 * args.warmup, rounds=args.rounds,
                              chunk=chunk, items_per_step=size * b, progress=progress)
    identical = {}
    for config in CONFIGS:
        sess, *_, weights = sessions[config]
        mine = np.concatenate([w.ravel() for w in sess.run(weights)])
        everyone = comm.allgather(mine)
        identical[config] = all(np.allclose(other, everyone[0], rtol=1e-5, atol=1e-6)
                                for other in everyone)
        sess.close()
    if rank == 0:
        _report(args, size, chunk, rates, identical)


def _report(args: argparse.Namespace, size: int, chunk: int, rates: dict[str, list[float]],
            identical: dict[str, bool]) -> None:
    print(f"\nTF1 session.run training steps, MLP {'-'.join(map(str, WIDTHS))}, {size} ranks, "
          f"batch {args.batch_size} per rank, {args.rounds} rounds x {chunk} runs per "
          f"configuration (interleaved)\n")
    print("| configuration | samples/s (median) | min | max | weights identical on every rank |")
    print("|---|---|---|---|---|")
    for c in CONFIGS:
        print(f"| {c} | {statistics.median(rates[c]):.0f} | {min(rates[c]):.0f} | "
              f"{max(rates[c]):.0f} | {identical[c]} |")
    summary = {}
    for a, b in (("hvdcore", "raw"), ("hvdcore", "solo"), ("hvdcore_passes4", "solo"),
                 ("raw", "solo")):
        r = ratios(rates, a, b)
        summary[f"{a}/{b}"] = statistics.median(r)
        print(f"| {a} / {b} | {statistics.median(r):.3f} | {min(r):.3f} | {max(r):.3f} | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ranks": size, "chunk": chunk, "rates": rates,
                       "median_ratios": summary, "identical": identical}, f, indent=1)


def main() -> None:
    p = chunked_parser(__doc__.split("\n\n")[0], rounds=6, chunk=20,
                       chunk_help="runs per chunk, rounded down to a multiple of 4",
                       batch_size=64, batch_help="samples per rank and run", warmup=2,
                       warmup_help="untimed windows of 4 runs per configuration")
    run(p.parse_args(), _worker, _driver)

if __name__ == "__main__":
    main()
