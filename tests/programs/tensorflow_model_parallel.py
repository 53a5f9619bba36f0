"""The last two gaps of Horovod 0.28.1's TensorFlow API (issue 58), at any world size.

1. ``DistributedGradientTape.register_local_source`` (horovod/tensorflow/__init__.py
   ``_DistributedGradientTape``): a registered source's gradient is not allreduced; it is
   divided by the process set's size when ``scale_local_gradients`` (the default), returned
   as computed when not; every other gradient is averaged. Also ``PartialDistributedGradientTape
   (local_layers=...)``, ``get_local_and_global_gradients`` and ``tf.IndexedSlices`` local
   gradients (values divided). Eagerly and in ``tf.function``; the reference is computed in
   this one process from every rank's data and model-parallel weights (each rank's local
   weight differs, as in a model-parallel layer).
2. test_tensorflow.py ``test_horovod_broadcast_grad_cpu`` in a ``tf.compat.v1`` graph: one
   graph, one Session, a broadcast and its ``tf.gradients`` built and run for every dtype,
   dim and root rank; the gradient is Horovod's (Average-allreduce on the root, times zero
   elsewhere), so every rank runs the same ops under the same names.
Prints ``CHECK <name> ok`` (rank 0) and ``TF-MODEL-PARALLEL-OK rank=R seconds=S`` (its own
run time in the shared launch) on every rank.
"""

from __future__ import annotations

import itertools
import os
import time

START = time.perf_counter()

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow as hvd  # noqa: E402
from hvdcore.errors import ArgumentError  # noqa: E402

tf.get_logger().setLevel("ERROR")
hvd.init()
R, N = hvd.rank(), hvd.size()


def check(name: str, ok: bool, detail: object = "") -> None:
    if not ok:
        raise AssertionError(f"rank {R}: check {name} failed {detail}")
    if R == 0:
        print(f"CHECK {name} ok", flush=True)


def close(a: object, b: object) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-5, atol=1e-6))


# --- 1. local sources ---------------------------------------------------------------------------
# Rank r: data x_r, a shared weight (same everywhere), a local weight w_r (model parallel: its
# own on each rank) and a local embedding table whose rows are gathered (IndexedSlices).
def data(r: int) -> np.ndarray:
    return np.arange(12, dtype=np.float32).reshape(4, 3) * 0.1 + r


def local_w(r: int) -> np.ndarray:
    return (np.arange(2, dtype=np.float32).reshape(2, 1) + 1.0) * (r + 1)


SHARED0 = (np.arange(6, dtype=np.float32).reshape(3, 2) - 2.0) * 0.25
TABLE0 = np.arange(10, dtype=np.float32).reshape(5, 2) * 0.5


def loss_fn(x, shared, local, table):
    h = tf.matmul(x, shared)
    rows = tf.gather(table, [0, 2, 2, 4])
    return tf.reduce_sum(tf.matmul(h * rows, local) ** 2)


def plain_grads(r: int) -> list[np.ndarray]:
    """Rank r's own gradients (shared, local, dense table), no collective."""
    vs = [tf.Variable(SHARED0), tf.Variable(local_w(r)), tf.Variable(TABLE0)]
    with tf.GradientTape() as tape:
        loss = loss_fn(tf.constant(data(r)), *vs)
    return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, vs)]


REF = [plain_grads(r) for r in range(N)]
SHARED_AVG = np.mean([g[0] for g in REF], axis=0)


def dense(g):
    return tf.convert_to_tensor(g).numpy()


def run_tape(make_tape, scale: bool, split: bool = False):
    shared, local, table = (tf.Variable(SHARED0), tf.Variable(local_w(R)),
                            tf.Variable(TABLE0))

    def step():
        with tf.GradientTape() as t:
            loss = loss_fn(tf.constant(data(R)), shared, local, table)
        tape = make_tape(t, scale, local, table)
        sources = {"shared": shared, "local": local, "table": table}
        if split:
            return tape.get_local_and_global_gradients(loss, [shared, local, table])
        return tape.gradient(loss, sources, use_generic_names=True)

    return {"eager": step(), "function": tf.function(step)()}


def registering(t, scale, local, table):
    tape = hvd.DistributedGradientTape(t, scale_local_gradients=scale)
    tape.register_local_source(local)
    tape.register_local_source(table)
    return tape


for scale in (True, False):
    div = N if scale else 1
    for mode, g in run_tape(registering, scale).items():
        name = f"local_source.{'scaled' if scale else 'unscaled'}.{mode}"
        check(f"{name}.shared_averaged", close(g["shared"], SHARED_AVG), g["shared"])
        check(f"{name}.local_kept", close(g["local"], REF[R][1] / div), g["local"])
        check(f"{name}.indexed_slices_kept", isinstance(g["table"], tf.IndexedSlices)
              and close(dense(g["table"]), REF[R][2] / div), g["table"])

for mode, (loc, glob) in run_tape(registering, True, split=True).items():
    check(f"local_source.split.{mode}",
          len(loc) == 2 and len(glob) == 1 and close(glob[0][1], SHARED_AVG)
          and close(loc[0][1], REF[R][1] / N) and close(dense(loc[1][1]), REF[R][2] / N),
          (loc, glob))

# Without registration every gradient is averaged (the table's as gathered IndexedSlices).
for mode, g in run_tape(lambda t, s, lo, ta: hvd.DistributedGradientTape(t), True).items():
    check(f"local_source.none_registered.{mode}",
          close(g["local"], np.mean([g[1] for g in REF], axis=0))
          and close(dense(g["table"]), np.mean([g[2] for g in REF], axis=0)), g)

# PartialDistributedGradientTape: the trainable weights of the local Keras layers are local.
import keras  # noqa: E402

keras.utils.set_random_seed(7)
inner, head = keras.layers.Dense(2, name="inner"), keras.layers.Dense(1, name="head")
model = keras.Sequential([keras.Input((3,)), inner, head])
head.set_weights([local_w(R), np.full([1], 0.5 * R, np.float32)])  # model parallel: per rank
inner_w = [w.copy() for w in inner.get_weights()]


def keras_grads(r: int, distributed: bool) -> list[np.ndarray]:
    head.set_weights([local_w(r), np.full([1], 0.5 * r, np.float32)])
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(model(data(r)) ** 2)
    if distributed:
        t = hvd.PartialDistributedGradientTape(t, local_layers=head)
    return [dense(g) for g in t.gradient(loss, model.trainable_variables)]


keras_ref = [keras_grads(r, False) for r in range(N)]
got = keras_grads(R, True)
want = ([np.mean([k[i] for k in keras_ref], axis=0) for i in (0, 1)]
        + [keras_ref[R][i] / N for i in (2, 3)])
check("partial_tape.local_layers", all(close(a, b) for a, b in zip(got, want, strict=True)),
      (got, want))

for label, bad in (("register_local_source", lambda: hvd.DistributedGradientTape(
        tf.GradientTape()).register_local_source("w")),
                   ("partial_tape", lambda: hvd.PartialDistributedGradientTape(
                       tf.GradientTape(), local_layers=[3]))):
    try:
        bad()
    except ArgumentError as exc:
        check(f"local_source.refuses.{label}", isinstance(exc, ValueError), exc)
    else:
        raise AssertionError(f"rank {R}: {label} accepted a bad argument")

# --- 2. test_horovod_broadcast_grad_cpu in a TF1 graph --------------------------------------------
with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as sess:
    for dtype, dim, root in itertools.product([tf.float32, tf.float64], [1, 2, 3], range(N)):
        tensor = tf.cast(tf.ones([5] * dim) * R, dtype)
        broadcasted = hvd.broadcast(tensor, root)
        grad = tf.gradients(broadcasted, tensor, tf.ones([5] * dim, dtype))[0]
        out = sess.run(grad)  # this gradient alone, as Horovod's test evaluates it
        check(f"v1graph.broadcast_grad.{dtype.name}.dim{dim}.root{root}",
              out.dtype == dtype.as_numpy_dtype
              and np.array_equal(out, np.full([5] * dim, 1.0 if R == root else 0.0)), out)

got = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum, name="model_parallel.after")
check("model_parallel.recovers", close(got, [N, 2.0 * N]), got)
print(f"TF-MODEL-PARALLEL-OK rank={R} seconds={time.perf_counter() - START:.1f}", flush=True)
