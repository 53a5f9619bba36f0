"""What TensorFlow adds to an allreduce: raw mpi4py vs hvdcore on NumPy vs
``hvdcore.tensorflow.allreduce`` on an eager tensor, eagerly and inside a ``tf.function``
(the graph path compiled Keras training takes), in one job. Then the same bytes as a model's
gradients: ``--parts`` tensors of uneven lengths in one ``grouped_allreduce`` (what
``DistributedGradientTape`` submits), on NumPy and on TF tensors, against one raw call on
all the bytes.

Run under MPI with 2 (or more) ranks::

    hvdcorerun -np 2 python benchmarks/tensorflow_overhead.py
    mpirun -np 2 python benchmarks/tensorflow_overhead.py --sizes 4KiB --reps 2000 --json out.json

float32, op Sum, peers interleaved repetition by repetition after an MPI barrier, medians.
``overhead us`` is a TF call's median minus the NumPy call's: the cost of the TensorFlow
binding on top of the core (eager: the tensor's buffer to the core, the result back to a
tensor; graph: also calling the ``tf.function`` and its ``tf.numpy_function`` op).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")  # as hvdcore.init() sets it
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from mpi4py import MPI  # noqa: E402

import hvdcore as hvd  # noqa: E402
import hvdcore.tensorflow as hvt  # noqa: E402

_UNITS = {"KIB": 1 << 10, "MIB": 1 << 20}


def size_list(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        unit = next((u for u in _UNITS if part.endswith(u)), None)
        out.append(int(part[:-3]) * _UNITS[unit] if unit else int(part))
    return out


def part_lengths(count: int, parts: int) -> list[int]:
    """``parts`` uneven lengths summing to ``count``, like a model's layers: most are not a
    multiple of 16 floats, so packed back to back they would start at unaligned offsets."""
    base = count // parts
    lengths = [max(1, base + 3 * (i % 3) - 3) for i in range(parts - 1)]
    return [*lengths, count - sum(lengths)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=size_list, default=size_list("4KiB,64KiB,1MiB"),
                   help="message sizes (default 4KiB,64KiB,1MiB)")
    p.add_argument("--reps", type=int, default=1000, help="repetitions at the smallest size "
                   "(scaled down with size, at least 20)")
    p.add_argument("--parts", type=int, default=8,
                   help="tensors of the grouped rows (default 8; 0 leaves those rows out)")
    p.add_argument("--json", help="also write the results to this JSON file (rank 0)")
    args = p.parse_args()
    hvt.init()
    comm = MPI.COMM_WORLD.Dup()
    rows = []
    if comm.rank == 0:
        print(f"allreduce, float32, {comm.size} ranks, TensorFlow {tf.__version__}, "
              f"load average {os.getloadavg()[0]:.2f}")
        print(f"{'size':>8} {'peer':>16} {'median us':>11} {'vs mpi4py':>10} {'overhead us':>12}")
    for nbytes in args.sizes:
        x = np.random.default_rng(comm.rank).standard_normal(nbytes // 4).astype(np.float32)
        out = np.empty_like(x)
        t = tf.constant(x)
        label = f"{nbytes >> 10} KiB" if nbytes < 1 << 20 else f"{nbytes >> 20} MiB"
        peers: dict[str, Callable[[], object]] = {
            "mpi4py": lambda: comm.Allreduce(x, out, op=MPI.SUM),
            "hvdcore NumPy": lambda: hvd.allreduce(x, op=hvd.Sum, name=f"np.{nbytes}"),
            "hvdcore TF": lambda: hvt.allreduce(t, op=hvt.Sum, name=f"tf.{nbytes}"),
            "hvdcore TF graph": tf.function(
                lambda: hvt.allreduce(t, op=hvt.Sum, name=f"tfg.{nbytes}")),
        }
        want = hvd.allreduce(x, op=hvd.Sum, name=f"check.{nbytes}")
        assert np.array_equal(hvt.allreduce(t, op=hvt.Sum, name=f"tfc.{nbytes}").numpy(), want)
        assert np.array_equal(peers["hvdcore TF graph"]().numpy(), want)
        if args.parts and x.size >= 4 * args.parts:
            xs = np.split(x, np.cumsum(part_lengths(x.size, args.parts))[:-1])
            ts = [tf.constant(a) for a in xs]
            # (unnamed, as DistributedGradientTape submits them: TF's grouped_allreduce has
            # no name argument)
            peers.update({
                "NumPy grouped": lambda: hvd.grouped_allreduce(xs, op=hvd.Sum),
                "TF grouped": lambda: hvt.grouped_allreduce(ts, op=hvt.Sum),
                "TF graph grouped": tf.function(lambda: hvt.grouped_allreduce(ts, op=hvt.Sum)),
            })
            for k in ("NumPy grouped", "TF grouped", "TF graph grouped"):
                got = np.concatenate([np.asarray(r) for r in peers[k]()])
                assert np.array_equal(got, want), k
        reps = max(20, int(args.reps * 4096 / nbytes) if nbytes > 4096 else args.reps)
        samples: dict[str, list[float]] = {k: [] for k in peers}
        keys = list(peers)
        for fn in peers.values():
            for _ in range(5):
                fn()
        for i in range(reps):
            for k in keys[i % len(keys):] + keys[:i % len(keys)]:
                comm.Barrier()
                t0 = time.perf_counter()
                peers[k]()
                samples[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
        for k, v in med.items():
            # a TF row's overhead: over the NumPy call of the same shape (single or grouped)
            base = "NumPy grouped" if k.endswith("grouped") else "hvdcore NumPy"
            tf_row = "TF" in k
            over = v - med[base] if tf_row else 0.0
            rows.append({"bytes": nbytes, "peer": k, "median_us": v,
                         "ratio_to_mpi4py": v / med["mpi4py"], "overhead_us": over, "reps": reps,
                         "tensors": args.parts if k.endswith("grouped") else 1})
            if comm.rank == 0:
                print(f"{label:>8} {k:>16} {v:>11.1f} {v / med['mpi4py']:>9.2f}x "
                      f"{(f'{over:.1f}' if tf_row else ''):>12}")
    if args.json and comm.rank == 0:
        with open(args.json, "w") as fh:
            json.dump({"ranks": comm.size, "tensorflow": tf.__version__, "rows": rows}, fh,
                      indent=2)
    comm.Free()
    hvt.shutdown()


if __name__ == "__main__":
    main()
