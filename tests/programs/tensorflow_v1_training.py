"""TF1-style training in a ``MonitoredTrainingSession`` with Horovod's ``DistributedOptimizer``
(of a ``tf.compat.v1.train`` optimizer) and ``BroadcastGlobalVariablesHook``, at any world size.

Each rank starts from its own initial values and feeds its own batches; the hook must give every
rank rank 0's values, and ``opt.minimize`` must then train as one process would on the
concatenated batches from rank 0's values (reference: the same graph with the plain optimizer,
computed in this process). Gradient descent, momentum (its slot too) and Adam on a dense model;
gradient descent on an embedding (``tf.IndexedSlices`` gradients, allgathered).
``backward_passes_per_step`` N: one update per N runs, as one process would make it on the N
runs' batches of every rank (the loss times N when the passes are summed, Horovod's default),
``global_step`` counting every run; ``register_local_var``: that variable trains on each
rank's own gradient (divided by the size when ``scale_local_gradients``). ``op=Adasum``: the
delta optimizer, against every rank's local steps simulated here and combined with Horovod's
Adasum arithmetic every N runs (a power-of-two size; at 3 ranks a NotImplementedError, as
Adasum's other calls). Refused with a
ValueError: N > 1 outside a graph, N = 0, N > 1 with IndexedSlices gradients unless
``sparse_as_dense``, Adasum with ``average_aggregated_gradients``.

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


def model(embedding: bool, start: np.random.Generator):
    """Placeholders x and y, the variables (w, b, the embedding table or None) and the loss."""
    if embedding:
        x = v1.placeholder(tf.int32, [None, 2])
        table = v1.get_variable("table", initializer=start.normal(size=(6, 3)).astype(
            np.float32))
        features = tf.reduce_sum(tf.nn.embedding_lookup(table, x), axis=1)
    else:
        table = None
        x = v1.placeholder(tf.float32, [None, 3])
        features = x
    y = v1.placeholder(tf.float32, [None, 1])
    w = v1.get_variable("w", initializer=start.normal(size=(3, 1)).astype(np.float32))
    b = v1.get_variable("b", initializer=start.normal(size=(1,)).astype(np.float32))
    return x, y, w, b, table, tf.reduce_mean(tf.square(tf.matmul(features, w) + b - y))


def train(make_opt, distributed: bool, embedding: bool = False, passes: int = 1,
          average: bool = False, steps: int = STEPS, **options) -> dict[str, np.ndarray]:
    """Initial and final values after ``steps`` runs of the training op: this rank's own
    start and batches under hvdcore, else rank 0's start and every rank's batches
    concatenated (the reference). With ``passes`` N the reference takes one step per N runs
    on the N runs' batches together, its loss times N unless ``average`` (Horovod sums the N
    passes' gradients); runs after the last whole window are not applied."""
    start = rng(2, R if distributed else 0)
    with tf.Graph().as_default():
        x, y, w, b, table, loss = model(embedding, start)
        opt = make_opt()
        if distributed:
            opt = hvd.DistributedOptimizer(opt, backward_passes_per_step=passes,
                                           average_aggregated_gradients=average, **options)
        elif passes > 1 and not average:
            loss = loss * passes
        global_step = v1.train.get_or_create_global_step()
        step = opt.minimize(loss, global_step=global_step)
        slot = opt.get_slot(w, "momentum") if "momentum" in opt.get_slot_names() else None
        watched = {"w": w, "b": b, **({"table": table} if embedding else {}),
                   **({"slot": slot} if slot is not None else {})}
        hooks = [hvd.BroadcastGlobalVariablesHook(0)] if distributed else []
        with v1.train.MonitoredTrainingSession(hooks=hooks, save_checkpoint_secs=None,
                                               save_summaries_steps=None,
                                               log_step_count_steps=None) as sess:
            out = {f"start.{k}": v for k, v in sess.run(watched).items()}
            runs = range(steps) if distributed else range(steps // passes)
            for k in runs:
                ranks = [R] if distributed else list(range(N))
                ks = [k] if distributed else list(range(k * passes, (k + 1) * passes))
                xs, ys = zip(*(batch(r, j, embedding) for r in ranks for j in ks), strict=True)
                sess.run(step, feed_dict={x: np.concatenate(xs), y: np.concatenate(ys)})
            out.update(sess.run(watched))
            out["global_step"] = np.array(sess.run(global_step))
    return out


def same(name: str, make_opt, embedding: bool = False, passes: int = 1,
         average: bool = False, steps: int = STEPS, **options) -> None:
    got = train(make_opt, True, embedding, passes, average, steps, **options)
    want = train(make_opt, False, embedding, passes, average, steps)
    check(f"{name}.hook_gives_rank0_start",
          all(np.array_equal(got[k], want[k]) for k in got if k.startswith("start.")))
    want["global_step"] = np.array(steps)  # (every run counts a step, applied or not)
    for key in (k for k in got if not k.startswith("start.")):
        check(f"{name}.{key}", np.allclose(got[key], want[key], rtol=1e-5, atol=1e-6),
              np.abs(got[key] - want[key]).max())


def local_bias(scale: bool, passes: int) -> None:
    """``register_local_var(b)``: b keeps each rank's own gradient, divided by the size when
    ``scale``. Reference: one weight, one bias per rank, loss the mean of the ranks' losses
    (so w gets the averaged gradient and rank r's bias 1/N of its own), the bias gradients
    multiplied by N when not ``scale``."""
    lr = 0.05
    with tf.Graph().as_default():
        x, y, w, b, _, loss = model(False, rng(2, R))
        opt = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(lr),
                                       backward_passes_per_step=passes,
                                       average_aggregated_gradients=True,
                                       scale_local_gradients=scale)
        opt.register_local_var(b)
        step = opt.minimize(loss)
        hooks = [hvd.BroadcastGlobalVariablesHook(0)]
        with v1.train.MonitoredTrainingSession(hooks=hooks, save_checkpoint_secs=None,
                                               save_summaries_steps=None,
                                               log_step_count_steps=None) as sess:
            for k in range(STEPS * passes):
                sess.run(step, feed_dict=dict(zip((x, y), batch(R, k, False), strict=True)))
            got = sess.run({"w": w, "b": b})
    with tf.Graph().as_default():
        start = rng(2, 0)
        w = v1.get_variable("w", initializer=start.normal(size=(3, 1)).astype(np.float32))
        b0 = start.normal(size=(1,)).astype(np.float32)
        bs = [v1.get_variable(f"b{r}", initializer=b0) for r in range(N)]
        xs = [v1.placeholder(tf.float32, [None, 3]) for _ in range(N)]
        ys = [v1.placeholder(tf.float32, [None, 1]) for _ in range(N)]
        total = tf.add_n([tf.reduce_mean(tf.square(tf.matmul(xs[r], w) + bs[r] - ys[r]))
                          for r in range(N)]) / N
        plain = v1.train.GradientDescentOptimizer(lr)
        pairs = [(g if v is w or scale else g * N, v) for g, v in plain.compute_gradients(total)]
        step = plain.apply_gradients(pairs)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for k in range(STEPS):
                feed = {}
                for r in range(N):  # rank r's passes of this window, on its own loss
                    rows = [batch(r, j, False) for j in range(k * passes, (k + 1) * passes)]
                    feed[xs[r]] = np.concatenate([row[0] for row in rows])
                    feed[ys[r]] = np.concatenate([row[1] for row in rows])
                sess.run(step, feed_dict=feed)
            want = {"w": sess.run(w), "b": sess.run(bs[R])}
    tag = f"local_{'scaled' if scale else 'unscaled'}_{passes}"
    for key in ("w", "b"):
        check(f"{tag}.{key}", np.allclose(got[key], want[key], rtol=1e-5, atol=1e-6),
              np.abs(got[key] - want[key]).max())


def adasum_pair(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Horovod's Adasum of two vectors (its test_adasum_tensorflow.py arithmetic)."""
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    dot, aa, bb = a64 @ b64, a64 @ a64, b64 @ b64
    ca = 1.0 - dot / aa / 2 if aa else 1.0
    cb = 1.0 - dot / bb / 2 if bb else 1.0
    return (ca * a64 + cb * b64).reshape(a.shape)


def adasum_tree(vectors: list[np.ndarray]) -> np.ndarray:
    """Pairs (0, 1), (2, 3), ... combined level by level (a power-of-two count)."""
    while len(vectors) > 1:
        vectors = [adasum_pair(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    return vectors[0]


def adasum_delta(passes: int, windows: int) -> None:
    """``op=Adasum``: each rank steps on its own batches; every ``passes`` runs the ranks'
    changes since the last combination are combined with Adasum (per variable) and every
    rank restarts from the combined point. Reference: every rank's local SGD simulated here
    from the common start, window by window; with ``passes`` > 1 one run more at the end
    (local only: no combination)."""
    lr, runs = 0.05, passes * windows + (passes > 1)
    with tf.Graph().as_default():
        x, y, w, b, _, loss = model(False, rng(2, R))
        opt = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(lr), op=hvd.Adasum,
                                       backward_passes_per_step=passes)
        global_step = v1.train.get_or_create_global_step()
        step = opt.minimize(loss, global_step=global_step)
        with v1.train.MonitoredTrainingSession(hooks=[hvd.BroadcastGlobalVariablesHook(0)],
                                               save_checkpoint_secs=None,
                                               save_summaries_steps=None,
                                               log_step_count_steps=None) as sess:
            for k in range(runs):
                sess.run(step, feed_dict=dict(zip((x, y), batch(R, k, False), strict=True)))
            got = sess.run({"w": w, "b": b, "global_step": global_step})
    with tf.Graph().as_default():
        x, y, w, b, _, loss = model(False, rng(2, 0))
        step = v1.train.GradientDescentOptimizer(lr).minimize(loss)
        value = v1.placeholder(tf.float32)
        loads = {v: v.assign(tf.reshape(value, v.shape)) for v in (w, b)}
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            start = sess.run({"w": w, "b": b})

            def local(r: int, ks: range) -> dict[str, np.ndarray]:
                for v, key in ((w, "w"), (b, "b")):
                    sess.run(loads[v], feed_dict={value: start[key]})
                for k in ks:
                    sess.run(step, feed_dict=dict(zip((x, y), batch(r, k, False), strict=True)))
                return sess.run({"w": w, "b": b})

            for n in range(windows):
                ends = [local(r, range(n * passes, (n + 1) * passes)) for r in range(N)]
                start = {key: start[key] + adasum_tree([e[key] - start[key] for e in ends])
                         for key in start}
            want = local(R, range(passes * windows, runs))
    want["global_step"] = np.array(runs)
    for key in ("w", "b", "global_step"):
        check(f"adasum_{passes}.{key}", np.allclose(got[key], want[key], rtol=1e-5, atol=1e-6),
              np.abs(got[key] - want[key]).max())


same("sgd", lambda: v1.train.GradientDescentOptimizer(0.05))
same("momentum", lambda: v1.train.MomentumOptimizer(0.05, 0.9))
same("adam", lambda: v1.train.AdamOptimizer(0.01))
same("sgd_embedding", lambda: v1.train.GradientDescentOptimizer(0.05), embedding=True)
# backward_passes_per_step: N passes summed (or averaged), reduced and applied once; a last
# partial window is not applied; global_step counts every pass
same("passes2_sgd", lambda: v1.train.GradientDescentOptimizer(0.05), passes=2, steps=5)
same("passes3_adam_avg", lambda: v1.train.AdamOptimizer(0.01), passes=3, average=True, steps=6)
same("passes2_embedding", lambda: v1.train.GradientDescentOptimizer(0.05), embedding=True,
     passes=2, average=True, steps=4, sparse_as_dense=True)
local_bias(scale=True, passes=1)
local_bias(scale=False, passes=2)


def refused(what: str, words: str, build, error: type[Exception] = ValueError) -> None:
    try:
        build()
        raise AssertionError(f"rank {R}: {what} accepted")
    except error as exc:
        check(f"refused.{what}", words in str(exc), exc)


if N & (N - 1) == 0:
    adasum_delta(passes=1, windows=2)
    adasum_delta(passes=2, windows=2)
else:  # (checked when the optimizer is made, on every rank)
    def adasum_three() -> None:
        with tf.Graph().as_default():
            hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.1), op=hvd.Adasum)

    refused("adasum_ranks", "power-of-two number of ranks", adasum_three, NotImplementedError)
refused("adasum_averaged", "average_aggregated_gradients",
        lambda: hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.1), op=hvd.Adasum,
                                         backward_passes_per_step=2,
                                         average_aggregated_gradients=True))
refused("passes_eager", "build the optimizer inside",  # (outside a graph: eager)
        lambda: hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.1),
                                         backward_passes_per_step=2))
refused("passes_zero", "must be >= 1",
        lambda: hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.1),
                                         backward_passes_per_step=0))


def sparse_passes() -> None:
    with tf.Graph().as_default():
        *_, loss = model(True, rng(2, R))
        opt = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.1),
                                       backward_passes_per_step=2)
        opt.minimize(loss)


refused("passes_sparse", "sparse_as_dense=True", sparse_passes)
print(f"TF-V1-TRAINING-OK rank={R} size={N} checks={CHECKS}", flush=True)
