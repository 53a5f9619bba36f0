"""``hvd.SyncBatchNormalization`` against Horovod's arithmetic, at any world size.

Run as ``mpirun -np N python tensorflow_sync_bn.py OUTDIR`` (``TF_USE_LEGACY_KERAS=1``: on
tf-keras). Horovod's layer (horovod/tensorflow/sync_batch_norm.py) averages each rank's batch
mean and ``variance + mean**2`` over the ranks with one Sum allreduce divided by the size. With
equal per-rank batches that is one batch normalization over all ranks' batches, so each rank
computes the reference in this one process, a plain ``BatchNormalization`` on the concatenated
batches of every rank (each rank's data is made from its rank number):

1. training outputs, moving mean and variance, input gradients of ``sum_r <y_r, w_r>`` (the
   gradient flows through the allreduce: each rank's slice of the concatenated gradient) and
   the Sum of the ranks' gamma/beta gradients; eager and in tf.function; 2-D and 4-D input,
   ``axis=-1`` and ``axis=1``;
2. unequal batches (rank r has r + 2 rows): Horovod's equal weights per rank, in NumPy;
3. inference (``training=False``) normalizes with the moving statistics, as BatchNormalization;
4. compiled ``model.fit`` with hvdcore's Keras DistributedOptimizer: the weights and moving
   statistics after 3 steps equal one process trained on the concatenated batches with plain
   BatchNormalization;
5. ``fused=True`` and (Keras 3) ``synchronized=True`` are ValueErrors naming the argument; a
   saved model loads without ``custom_objects``; ``hvdcore.keras.SyncBatchNormalization`` is
   this layer.

Prints ``CHECK <flavour>.<name> ok`` (rank 0) and ``TF-SYNC-BN-OK flavour=F rank=R size=N``.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow as hvd  # noqa: E402
import hvdcore.tensorflow.keras as khvd  # noqa: E402
from hvdcore.tensorflow.keras import flavours  # noqa: E402

tf.get_logger().setLevel("ERROR")
K = tf.keras
FLAVOUR = ("tf_keras" if K.__name__.startswith("tf_keras")
           else "keras2" if flavours.keras_major() < 3 else "keras3")
OUTDIR = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()
CHECKS = 0
ARGS = {"momentum": 0.5, "epsilon": 1e-3, "moving_mean_initializer": "ones",
        "moving_variance_initializer": "ones", "gamma_initializer": "random_uniform",
        "beta_initializer": "random_uniform"}
# Keras 2's fused kernel (its default for 4-D input) moves the moving variance by the unbiased
# batch variance; Horovod's layer is never fused: the reference is not either
UNFUSED = {} if FLAVOUR == "keras3" else {"fused": False}


def check(name: str, ok: bool, detail: object = "") -> None:
    global CHECKS
    if not ok:
        raise AssertionError(f"[{FLAVOUR}] rank {R}: check {name} failed {detail}")
    CHECKS += 1
    if R == 0:
        print(f"CHECK {FLAVOUR}.{name} ok", flush=True)


def close(a: object, b: object, tol: float = 2e-5) -> bool:
    return bool(np.allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol))


def data(rank: int, rows: int, shape: tuple[int, ...], salt: int) -> np.ndarray:
    """Rank ``rank``'s batch: its own values, scale and offset, float32."""
    rng = np.random.default_rng(1000 * salt + rank)
    return (rng.normal(size=(rows, *shape)) * (rank + 1) + rank).astype(np.float32)


def layers(axis: int, seed: int, shape: tuple[int, ...]) -> tuple[object, object]:
    """(the synced layer, the plain reference) with the same initial weights (built at once:
    tf-keras draws unseeded initial values when a layer is built)."""
    K.utils.set_random_seed(seed)
    synced = hvd.SyncBatchNormalization(axis=axis, **ARGS)
    synced.build((None, *shape))
    K.utils.set_random_seed(seed)
    plain = K.layers.BatchNormalization(axis=axis, **ARGS, **UNFUSED)
    plain.build((None, *shape))
    return synced, plain


def equal_batches(name: str, shape: tuple[int, ...], axis: int, compiled: bool) -> None:
    rows, salt = 4, len(name)
    xs = [data(r, rows, shape, salt) for r in range(N)]
    ws = [data(r + 100, rows, shape, salt) for r in range(N)]
    synced, plain = layers(axis, salt, shape)

    def mine(x: tf.Tensor) -> tuple:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = synced(x, training=True)
            loss = tf.reduce_sum(y * ws[R])
        return (y, *tape.gradient(loss, [x, synced.gamma, synced.beta]))

    def reference(x: tf.Tensor) -> tuple:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = plain(x, training=True)
            loss = tf.reduce_sum(y * np.concatenate(ws))
        return (y, *tape.gradient(loss, [x, plain.gamma, plain.beta]))

    step = tf.function(mine) if compiled else mine
    y, dx, dgamma, dbeta = step(tf.constant(xs[R]))
    y_ref, dx_ref, dgamma_ref, dbeta_ref = reference(tf.constant(np.concatenate(xs)))
    part = slice(R * rows, (R + 1) * rows)
    check(f"{name}.output", close(y, y_ref[part]), np.abs(y - y_ref[part]).max())
    check(f"{name}.moving_mean", close(synced.moving_mean, plain.moving_mean))
    check(f"{name}.moving_variance", close(synced.moving_variance, plain.moving_variance))
    check(f"{name}.input_gradient", close(dx, dx_ref[part], 1e-4),
          np.abs(dx - dx_ref[part]).max())
    summed = [hvd.allreduce(g, op=hvd.Sum, name=f"sbn.{name}.{i}")
              for i, g in enumerate((dgamma, dbeta))]
    check(f"{name}.gamma_beta_gradients", close(summed[0], dgamma_ref, 1e-4)
          and close(summed[1], dbeta_ref, 1e-4))


def unequal_batches() -> None:
    """Horovod weighs every rank alike, whatever its batch size: NumPy of its formula."""
    xs = [data(r, r + 2, (3,), 7) for r in range(N)]
    synced, _ = layers(-1, 7, (3,))
    y = synced(tf.constant(xs[R]), training=True)
    means = [x.astype(np.float64).mean(0) for x in xs]
    squares = [x.astype(np.float64).var(0) + m ** 2 for x, m in zip(xs, means, strict=True)]
    mean = np.mean(means, 0)
    var = np.mean(squares, 0) - mean ** 2
    want = (xs[R] - mean) / np.sqrt(var + ARGS["epsilon"]) * synced.gamma.numpy() \
        + synced.beta.numpy()
    check("unequal.output", close(y, want, 1e-4), np.abs(y - want).max())
    check("unequal.moving_mean", close(synced.moving_mean, 0.5 + 0.5 * mean, 1e-4))


def inference() -> None:
    synced, plain = layers(-1, 11, (3,))
    x = data(R, 5, (3,), 11)
    synced(tf.constant(x), training=True)  # moves the moving statistics (the job's)
    plain.set_weights(synced.get_weights())
    check("inference.moving_statistics", close(synced(x, training=False),
                                               plain(x, training=False)))


def fit() -> None:
    rows, steps = 4, 3
    xs = [data(r, rows * steps, (3,), 13) for r in range(N)]
    ys = [data(r + 50, rows * steps, (1,), 13) for r in range(N)]

    def model(norm: type) -> object:
        K.utils.set_random_seed(5)
        return K.Sequential([K.Input((3,)), K.layers.Dense(4), norm(momentum=0.5),
                             K.layers.Dense(1)])

    synced = model(hvd.SyncBatchNormalization)
    synced.compile(optimizer=khvd.DistributedOptimizer(K.optimizers.SGD(0.02)), loss="mse")
    synced.fit(xs[R], ys[R], batch_size=rows, epochs=1, shuffle=False, verbose=0)
    plain = model(lambda **kw: K.layers.BatchNormalization(**kw, **UNFUSED))
    plain.compile(optimizer=K.optimizers.SGD(0.02), loss="mse")
    # step k of the reference: every rank's batch k together
    xall = np.concatenate([np.concatenate([x[k * rows:(k + 1) * rows] for x in xs])
                           for k in range(steps)])
    yall = np.concatenate([np.concatenate([y[k * rows:(k + 1) * rows] for y in ys])
                           for k in range(steps)])
    plain.fit(xall, yall, batch_size=rows * N, epochs=1, shuffle=False, verbose=0)
    got, want = synced.get_weights(), plain.get_weights()
    check("fit.weights_and_moving_statistics_match_one_process",
          len(got) == len(want) and all(close(a, b, 1e-4) for a, b in zip(got, want, strict=False)),
          [np.abs(a - b).max() for a, b in zip(got, want, strict=False)])


def errors() -> None:
    try:
        hvd.SyncBatchNormalization(fused=True)
        raise AssertionError("fused=True accepted")
    except ValueError as exc:
        check("fused_true.refused", "fused=True" in str(exc), exc)
    if FLAVOUR == "keras3":
        try:
            hvd.SyncBatchNormalization(synchronized=True)
            raise AssertionError("synchronized=True accepted")
        except ValueError as exc:
            check("synchronized_true.refused", "synchronized=True" in str(exc), exc)
    m = K.Sequential([K.Input((3,)), hvd.SyncBatchNormalization(),
                      hvd.SyncBatchNormalization()])
    check("default_names.unique", len({layer.name for layer in m.layers}) == 2,
          [layer.name for layer in m.layers])
    path = os.path.join(OUTDIR, f"sbn.{R}." + ("keras" if FLAVOUR == "keras3" else "h5"))
    m.save(path)
    loaded = K.models.load_model(path)
    check("saved.loads_without_custom_objects",
          [type(layer).__name__ for layer in loaded.layers] == ["SyncBatchNormalization"] * 2)
    import hvdcore.keras as portable  # on the TensorFlow backend: this very layer

    check("hvdcore_keras.same_layer",
          portable.SyncBatchNormalization is hvd.SyncBatchNormalization)


equal_batches("dense.eager", (3,), -1, False)
equal_batches("dense.function", (3,), -1, True)
equal_batches("nhwc.function", (2, 2, 3), -1, True)
equal_batches("nchw.eager", (3, 2, 2), 1, False)
unequal_batches()
inference()
fit()
errors()
print(f"TF-SYNC-BN-OK flavour={FLAVOUR} rank={R} size={N} checks={CHECKS}", flush=True)
