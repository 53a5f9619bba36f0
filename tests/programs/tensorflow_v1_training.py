"""TF1-style training in a ``MonitoredTrainingSession`` with Horovod's ``DistributedOptimizer``
(of a ``tf.compat.v1.train`` optimizer) and ``BroadcastGlobalVariablesHook``, at any world size.

Each rank starts from its own initial values and feeds its own batches; the hook must give every
rank rank 0's values, and ``opt.minimize`` must then train as one process would on the
concatenated batches from rank 0's values (reference: the same graph with the plain optimizer,
computed in this process). Gradient descent, momentum (its slot too) and Adam on a dense model;
gradient descent on an embedding (``tf.IndexedSlices`` gradients, allgathered). ``op=Adasum`` and
``backward_passes_per_step=2`` are ValueErrors naming what to use instead.

Prints ``CHECK tfv1.<name> ok`` (rank 0) and ``TF-V1-TRAINING-OK rank=R size=N checks=C``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow as hvd  # noqa: E402

tf.get_logger().setLevel("ERROR")
v1 = tf.compat.v1
hvd.init()
R, N = hvd.rank(), hvd.size()
STEPS, ROWS = 3, 4
CHECKS = 0


def check(name: str, ok: bool, detail: object = "") -> None:
    global CHECKS
    if not ok:
        raise AssertionError(f"rank {R}: check tfv1.{name} failed {detail}")
    CHECKS += 1
    if R == 0:
        print(f"CHECK tfv1.{name} ok", flush=True)


def rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([7, *key])


def batch(rank: int, step: int, embedding: bool) -> tuple[np.ndarray, np.ndarray]:
    g = rng(1, rank, step)
    x = g.integers(0, 6, size=(ROWS, 2)) if embedding else g.normal(size=(ROWS, 3))
    return x, g.normal(size=(ROWS, 1)).astype(np.float32)


def train(make_opt, distributed: bool, embedding: bool = False) -> dict[str, np.ndarray]:
    """Initial and final values after STEPS steps: this rank's own start and batches under
    hvdcore, else rank 0's start and every rank's batches concatenated (the reference)."""
    start = rng(2, R if distributed else 0)
    with tf.Graph().as_default():
        if embedding:
            x = v1.placeholder(tf.int32, [None, 2])
            table = v1.get_variable("table", initializer=start.normal(size=(6, 3)).astype(
                np.float32))
            features = tf.reduce_sum(tf.nn.embedding_lookup(table, x), axis=1)
        else:
            x = v1.placeholder(tf.float32, [None, 3])
            features = x
        y = v1.placeholder(tf.float32, [None, 1])
        w = v1.get_variable("w", initializer=start.normal(size=(3, 1)).astype(np.float32))
        b = v1.get_variable("b", initializer=start.normal(size=(1,)).astype(np.float32))
        loss = tf.reduce_mean(tf.square(tf.matmul(features, w) + b - y))
        opt = make_opt()
        if distributed:
            opt = hvd.DistributedOptimizer(opt)
        step = opt.minimize(loss, global_step=v1.train.get_or_create_global_step())
        slot = opt.get_slot(w, "momentum") if "momentum" in opt.get_slot_names() else None
        watched = {"w": w, "b": b, **({"table": table} if embedding else {}),
                   **({"slot": slot} if slot is not None else {})}
        hooks = [hvd.BroadcastGlobalVariablesHook(0)] if distributed else []
        with v1.train.MonitoredTrainingSession(hooks=hooks, save_checkpoint_secs=None,
                                               save_summaries_steps=None,
                                               log_step_count_steps=None) as sess:
            out = {f"start.{k}": v for k, v in sess.run(watched).items()}
            for k in range(STEPS):
                ranks = [R] if distributed else list(range(N))
                xs, ys = zip(*(batch(r, k, embedding) for r in ranks), strict=True)
                sess.run(step, feed_dict={x: np.concatenate(xs), y: np.concatenate(ys)})
            out.update(sess.run(watched))
    return out


def same(name: str, make_opt, embedding: bool = False) -> None:
    got = train(make_opt, True, embedding)
    want = train(make_opt, False, embedding)
    check(f"{name}.hook_gives_rank0_start",
          all(np.array_equal(got[k], want[k]) for k in got if k.startswith("start.")))
    for key in (k for k in got if not k.startswith("start.")):
        check(f"{name}.{key}", np.allclose(got[key], want[key], rtol=1e-5, atol=1e-6),
              np.abs(got[key] - want[key]).max())


same("sgd", lambda: v1.train.GradientDescentOptimizer(0.05))
same("momentum", lambda: v1.train.MomentumOptimizer(0.05, 0.9))
same("adam", lambda: v1.train.AdamOptimizer(0.01))
same("sgd_embedding", lambda: v1.train.GradientDescentOptimizer(0.05), embedding=True)
for what, kwargs, words in (("adasum", {"op": hvd.Adasum}, "Adasum"),
                            ("passes", {"backward_passes_per_step": 2},
                             "backward_passes_per_step=2")):
    try:
        hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.1), **kwargs)
        raise AssertionError(f"rank {R}: {what} accepted")
    except ValueError as exc:
        check(f"refused.{what}", words in str(exc) and "Keras optimizer" in str(exc), exc)
print(f"TF-V1-TRAINING-OK rank={R} size={N} checks={CHECKS}", flush=True)
