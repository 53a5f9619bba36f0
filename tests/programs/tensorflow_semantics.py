"""hvdcore.tensorflow against Horovod 0.28.1's semantics (issue 18), at any world size.

Checks, each against a reference computed in this one process:
- gradients of allgather, broadcast, reducescatter (Sum, Average), alltoall, grouped_allreduce,
  grouped_allgather, grouped_reducescatter follow horovod/tensorflow/mpi_ops.py's registered
  gradients (eager and in tf.function);
- ``alltoall(t)`` returns the tensor alone, ``alltoall(t, splits)`` a (tensor, splits) pair;
- negotiation failures raise tf.errors.FailedPreconditionError (eager and in tf.function), bad
  alltoall arguments tf.errors.InvalidArgumentError that is also a ValueError; Horovod's error
  cases run back to back, twice each, and a collective works after every one;
- join returns the last rank to join; shutdown returns.
Prints ``CHECK <name> ok`` (rank 0) and ``TF-SEMANTICS-OK rank=R`` on every rank.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow as hvd  # noqa: E402

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
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-6, atol=1e-6))


def modes(fn):
    """fn run eagerly and as a tf.function."""
    return {"eager": fn(), "graph": tf.function(fn)()}


def grad_of(op, x0: np.ndarray, weight_fn):
    """d/dx sum(op(x) * weight_fn(op(x))) on this rank, eager and in tf.function."""
    x = tf.Variable(x0)

    def run():
        with tf.GradientTape() as tape:
            y = op(x)
            loss = tf.reduce_sum(y * weight_fn(y))
        return tape.gradient(loss, x)

    return modes(run)


def ok_after(label: str) -> None:
    got = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum, name=f"after.{label}")
    check(f"recovers.{label}", close(got, [N, 2.0 * N]), got)


# --- gradients (horovod/tensorflow/mpi_ops.py registered gradients) -----------------------------
# allgather: rank r gives r + 1 rows; output row i is weighted (i + 1) * (r + 1) on rank r.
# Horovod: Average-allreduce of the output gradient, then this rank's rows.
rows = [r + 1 for r in range(N)]
offset = sum(rows[:R])
total_rows = sum(rows)
w_mean = np.mean([(np.arange(total_rows) + 1.0) * (r + 1) for r in range(N)], axis=0)
expect = np.repeat(w_mean[offset:offset + rows[R], None], 2, axis=1)
for mode, g in grad_of(lambda x: hvd.allgather(x), np.ones((rows[R], 2), np.float32),
                       lambda y: tf.cast(tf.range(1, tf.shape(y)[0] + 1), y.dtype)[:, None]
                       * (R + 1)).items():
    check(f"gradient.allgather.{mode}", close(g, expect), g)

# broadcast: the loss on rank r weighs the output by r + 1; Horovod: the root gets the
# Average of the output gradients, every other rank zeros.
root = N - 1
for mode, g in grad_of(lambda x: hvd.broadcast(x, root_rank=root),
                       np.full((2, 3), float(R), np.float32),
                       lambda y: tf.fill(tf.shape(y), float(R + 1))).items():
    want = np.full((2, 3), np.mean([r + 1.0 for r in range(N)]) if R == root else 0.0)
    check(f"gradient.broadcast.{mode}", close(g, want), g)

# reducescatter: d0 = 2N + 1 (uneven); rank r weighs its output by r + 1. Horovod: allgather
# of the output gradient, times the set size for Sum.
d0 = 2 * N + 1
counts = [d0 // N + (1 if r < d0 % N else 0) for r in range(N)]
gathered_w = np.concatenate([np.full((counts[r], 2), r + 1.0) for r in range(N)])
for opname, op, factor in (("Sum", hvd.Sum, N), ("Average", hvd.Average, 1)):
    for mode, g in grad_of(lambda x, op=op: hvd.reducescatter(x, op=op),
                           np.ones((d0, 2), np.float32),
                           lambda y: tf.fill(tf.shape(y), float(R + 1))).items():
        check(f"gradient.reducescatter.{opname}.{mode}", close(g, gathered_w * factor), g)

# alltoall with splits: rank r sends j + 1 rows to rank j; the loss weighs output row i on
# rank r by 10 * (r + 1) + i. Horovod: alltoall of the gradient back with the received splits.
splits = [j + 1 for j in range(N)]
send_rows = sum(splits)


def out_weights(r: int) -> np.ndarray:
    return 10.0 * (r + 1) + np.arange(N * (r + 1), dtype=np.float64)


back = np.concatenate([out_weights(j)[R * (j + 1):(R + 1) * (j + 1)] for j in range(N)])
for mode, g in grad_of(lambda x: hvd.alltoall(x, splits=splits)[0],
                       np.ones((send_rows, 2), np.float32),
                       lambda y: (10.0 * (R + 1)
                                  + tf.cast(tf.range(tf.shape(y)[0]), y.dtype))[:, None]).items():
    check(f"gradient.alltoall.{mode}", close(g, np.repeat(back[:, None], 2, axis=1)), g)

# grouped_allreduce (Sum): Horovod: the same grouped allreduce of the gradients
for mode, g in grad_of(lambda x: tf.add_n([tf.reduce_sum(t) for t in
                                           hvd.grouped_allreduce([x, 2.0 * x], op=hvd.Sum)]),
                       np.ones((3,), np.float32),
                       lambda y: tf.constant(float(R + 1))).items():
    check(f"gradient.grouped_allreduce.{mode}",
          close(g, np.full((3,), 3.0 * sum(r + 1.0 for r in range(N)))), g)

# grouped_allgather: as allgather, per tensor
for mode, g in grad_of(lambda x: hvd.grouped_allgather([x, x])[1],
                       np.ones((rows[R], 2), np.float32),
                       lambda y: tf.cast(tf.range(1, tf.shape(y)[0] + 1), y.dtype)[:, None]
                       * (R + 1)).items():
    check(f"gradient.grouped_allgather.{mode}", close(g, expect), g)

# grouped_reducescatter (Sum): as reducescatter, per tensor
for mode, g in grad_of(lambda x: hvd.grouped_reducescatter([x], op=hvd.Sum)[0],
                       np.ones((d0, 2), np.float32),
                       lambda y: tf.fill(tf.shape(y), float(R + 1))).items():
    check(f"gradient.grouped_reducescatter.{mode}", close(g, gathered_w * N), g)

# allreduce (Sum) in eager mode records its gradient only when a tape watches the input: a
# constant watched with tape.watch, a tensor derived from a variable, a second-order tape; an
# unwatched tensor in a tape gets no gradient (None), and the values are the same either way.
c = tf.constant([1.0, 2.0])
with tf.GradientTape() as tape:
    tape.watch(c)
    y = hvd.allreduce(c * float(R + 1), op=hvd.Sum, name="eager.watched")
    loss = tf.reduce_sum(y * float(R + 1))
g = tape.gradient(loss, c)
tot = sum(r + 1.0 for r in range(N))
check("eager.allreduce.watched_constant", close(g, np.full(2, (R + 1.0) * tot)), g)
check("eager.allreduce.value", close(y, np.array([1.0, 2.0]) * tot), y)
other = tf.constant([3.0])
with tf.GradientTape() as tape:
    tape.watch(c)
    z = hvd.allreduce(other, op=hvd.Sum, name="eager.unwatched")
    loss = tf.reduce_sum(z) + tf.reduce_sum(c)
check("eager.allreduce.unwatched", close(tape.gradient(loss, c), [1.0, 1.0])
      and close(z, [3.0 * N]), z)
v = tf.Variable([2.0])
with tf.GradientTape() as outer:
    with tf.GradientTape() as inner:
        w = hvd.allreduce(v * v, op=hvd.Sum, name="eager.second")
    dw = inner.gradient(w, v)  # allreduce's gradient is allreduce(dy) = N: 2 v N = 4 N
d2 = outer.gradient(dw, v)  # dw = 2 v allreduce(1) = 2 v N, so d2 = 2 N
check("eager.allreduce.second_order", close(dw, [4.0 * N]) and close(d2, [2.0 * N]),
      (dw, d2))

# --- alltoall return type ----------------------------------------------------------------------
even = np.repeat(np.arange(N, dtype=np.float32)[:, None] + 10 * R, 2, axis=1)
for mode, out in modes(lambda: hvd.alltoall(tf.constant(even))).items():
    want = np.repeat(np.full((N,), float(R))[:, None] + 10 * np.arange(N)[:, None], 2, axis=1)
    check(f"alltoall.no_splits_returns_tensor.{mode}",
          isinstance(out, tf.Tensor) and close(out, want), type(out))
for mode, pair in modes(lambda: hvd.alltoall(tf.constant(even), splits=[1] * N)).items():
    check(f"alltoall.splits_returns_pair.{mode}",
          isinstance(pair, tuple) and len(pair) == 2 and pair[1].dtype == tf.int32
          and list(pair[1].numpy()) == [1] * N, pair)

# --- errors: Horovod's types; each case twice in a row, then a working collective --------------
ERROR_CASES = []
if N > 1:
    ERROR_CASES += [
        ("allreduce.dim", lambda: hvd.allreduce(tf.ones([17 + R] * 3)),
         tf.errors.FailedPreconditionError),
        ("allreduce.rank", lambda: hvd.allreduce(tf.ones([17, 23 * 57] if R == 0
                                                         else [17, 23, 57])),
         tf.errors.FailedPreconditionError),
        ("allreduce.dtype", lambda: hvd.allreduce(tf.ones([3], tf.float32 if R % 2
                                                          else tf.float64)),
         tf.errors.FailedPreconditionError),
        ("allgather.trailing", lambda: hvd.allgather(tf.ones([2, 3 + R])),
         tf.errors.FailedPreconditionError),
        ("allgather.dtype", lambda: hvd.allgather(tf.ones([2], tf.int32 if R % 2
                                                          else tf.float32)),
         tf.errors.FailedPreconditionError),
        ("broadcast.root", lambda: hvd.broadcast(tf.ones([2]), root_rank=R),
         tf.errors.FailedPreconditionError),
        ("broadcast.shape", lambda: hvd.broadcast(tf.ones([2 + R]), root_rank=0),
         tf.errors.FailedPreconditionError),
        ("alltoall.dtype", lambda: hvd.alltoall(tf.ones([N], tf.int32 if R % 2
                                                        else tf.float32)),
         tf.errors.FailedPreconditionError),
        ("reducescatter.shape", lambda: hvd.reducescatter(tf.ones([N, 2 + R])),
         tf.errors.FailedPreconditionError),
        ("alltoall.equal_split_length", lambda: hvd.alltoall(tf.ones([N + 1])),
         tf.errors.InvalidArgumentError),
    ]
ERROR_CASES += [
    ("alltoall.splits_sum", lambda: hvd.alltoall(tf.ones([N + 1]), splits=[1] * N),
     tf.errors.InvalidArgumentError),
    ("alltoall.splits_length", lambda: hvd.alltoall(tf.ones([N + 1]), splits=[1] * (N + 1)),
     tf.errors.InvalidArgumentError),
]
for mode in ("eager", "graph"):
    for label, fn, expected in ERROR_CASES:
        run = fn if mode == "eager" else tf.function(fn)
        for attempt in (1, 2):
            try:
                run()
            except expected as exc:
                msg = str(exc)
                check(f"error.{label}.{mode}.{attempt}",
                      expected is not tf.errors.InvalidArgumentError
                      or mode == "graph" or isinstance(exc, ValueError), (type(exc), msg))
            else:
                raise AssertionError(f"rank {R}: {label} ({mode}) did not raise")
        ok_after(f"{label}.{mode}")

# --- join: returns the last rank that joined --------------------------------------------------
if R == N - 1:
    last = hvd.join()
else:
    for _ in range(R + 1):
        hvd.allreduce(tf.ones([2]), op=hvd.Sum)
    last = hvd.join()
check("join.returns_last_rank", isinstance(last, tf.Tensor) and int(last) in range(N), last)
ok_after("join")

hvd.shutdown()
print(f"TF-SEMANTICS-OK rank={R}", flush=True)
