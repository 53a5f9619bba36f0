"""Compiled Keras model.fit with hvdcore's DistributedOptimizer and callbacks, checked against a
single-process reference.

Run at any world size: ``mpirun -np N python tensorflow_keras_fit.py OUTDIR``; set
``TF_USE_LEGACY_KERAS=1`` to run it with tf-keras instead of Keras 3. The program checks:

- weights are identical on every rank after every epoch, and equal (to tolerance) to ONE process
  trained on the concatenated per-rank batches with the same optimizer (reference computed in
  this process, with the same per-batch learning rate and gradient accumulation);
- the embedding layer's IndexedSlices gradients (allgather path) and sparse_as_dense;
- backward_passes_per_step with and without average_aggregated_gradients;
- tf-keras legacy (OptimizerV2) optimizers;
- MetricAverageCallback's logs are the mean of the ranks' own logs;
- LearningRateWarmupCallback sets the documented rate at every batch;
- BroadcastGlobalVariablesCallback(0) syncs models that start different on each rank;
- BestModelCheckpoint writes only on rank 0; load_model returns a wrapped optimizer and training
  continues in sync; broadcast_global_variables from a non-zero root.

Prints ``KERAS-FIT-OK flavour=... rank=R size=N`` at the end.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow.keras as hvd  # noqa: E402
from hvdcore.tensorflow import device_path  # noqa: E402
from hvdcore.tensorflow.keras import flavours as hvd_flavours  # noqa: E402
from hvdcore.tensorflow.keras.optimizer import is_distributed_optimizer  # noqa: E402

tf.get_logger().setLevel("ERROR")
K = tf.keras
# tf_keras: TF_USE_LEGACY_KERAS=1 on TensorFlow >= 2.16; keras2: the Keras 2 of TensorFlow <= 2.15
FLAVOUR = ("tf_keras" if K.__name__.startswith("tf_keras")
           else "keras2" if hvd_flavours.keras_major() < 3 else "keras3")
OUTDIR = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()
# init() imports torch only for a torch data plane (HVDCORE_CPU_OPERATIONS=gloo, or a GPU)
assert ("torch" in sys.modules) == device_path.active()
B, STEPS, VOCAB = 4, 4, 10


def check(name: str, ok: bool, detail: str = "") -> None:
    if not ok:
        raise AssertionError(f"[{FLAVOUR}] rank {R}: check {name} failed {detail}")
    if R == 0:
        print(f"CHECK {FLAVOUR}.{name} ok", flush=True)


def make_model(seed: int) -> object:
    K.utils.set_random_seed(seed)
    model = K.Sequential([
        K.Input((3,), dtype="int32"),
        K.layers.Embedding(VOCAB, 4),
        K.layers.Flatten(),
        K.layers.Dense(8, activation="tanh"),
        K.layers.Dense(3),
    ])
    return model


def global_data(seed: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VOCAB, size=(steps * N * B, 3)).astype(np.int32)
    y = (x.sum(axis=1) % 3).astype(np.int32)
    return x, y


def shard(arr: np.ndarray, rank: int) -> np.ndarray:
    """Rank's rows: in global batch k (N*B rows) rank r owns rows [r*B, (r+1)*B)."""
    batches = arr.reshape(-1, N * B, *arr.shape[1:])
    return batches[:, rank * B:(rank + 1) * B].reshape(-1, *arr.shape[1:])


def loss_fn() -> object:
    return K.losses.SparseCategoricalCrossentropy(from_logits=True)


class Recorder(K.callbacks.Callback):
    """Weights after every epoch, learning rate at every batch, logs at epoch end."""

    def __init__(self) -> None:
        super().__init__()
        self.weights: list[list[np.ndarray]] = []
        self.lrs: list[float] = []
        self.logs: list[dict[str, float]] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.lrs.append(float(np.asarray(self.model.optimizer.learning_rate)))

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append([np.array(w) for w in self.model.get_weights()])
        self.logs.append({k: float(np.asarray(v)) for k, v in (logs or {}).items()})


def reference(init: list[np.ndarray], make_opt, x: np.ndarray, y: np.ndarray, epochs: int,
              lrs: list[float], passes: int, average: bool) -> list[list[np.ndarray]]:
    """One process, batches of N*B rows, same learning rate per batch, same accumulation."""
    model = make_model(0)
    model.set_weights(init)
    opt = make_opt()
    variables = model.trainable_variables
    lossf = loss_fn()
    acc = [np.zeros(v.shape, np.float64) for v in variables]
    per_epoch = []
    step = 0
    for _ in range(epochs):
        for k in range(len(x) // (N * B)):
            xb, yb = x[k * N * B:(k + 1) * N * B], y[k * N * B:(k + 1) * N * B]
            with tf.GradientTape() as tape:
                loss = lossf(yb, model(xb, training=True))
            grads = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, variables)]
            acc = [a + g for a, g in zip(acc, grads, strict=True)]
            opt.learning_rate = lrs[step]
            step += 1
            if step % passes == 0:
                apply = [a / passes if average else a for a in acc]
                opt.apply_gradients([(tf.constant(a, tf.float32), v)
                                     for a, v in zip(apply, variables, strict=True)])
                acc = [np.zeros_like(a) for a in acc]
            else:  # Horovod counts a step that only accumulates (Adam's bias correction sees it)
                opt.iterations.assign_add(1)
        per_epoch.append([np.array(w) for w in model.get_weights()])
    return per_epoch


def same_on_all_ranks(weights: list[np.ndarray]) -> bool:
    everyone = hvd.allgather_object(weights)
    return all(np.array_equal(a, b) for other in everyone for a, b in zip(other, weights,
                                                                             strict=True))


def run_case(name: str, make_opt, epochs: int, passes: int = 1, average: bool = False,
             sparse_as_dense: bool = False, warmup: int = 0, checkpoint: str | None = None):
    model = make_model(1000 + R)  # different on every rank: the broadcast callback syncs it
    root_init = hvd.broadcast_object(model.get_weights(), root_rank=0)
    opt = hvd.DistributedOptimizer(make_opt(), backward_passes_per_step=passes,
                                   average_aggregated_gradients=average,
                                   sparse_as_dense=sparse_as_dense)
    model.compile(optimizer=opt, loss=loss_fn(), metrics=["accuracy"])
    x, y = global_data(5, STEPS)
    xv, yv = global_data(6, 1)
    raw, averaged = Recorder(), Recorder()
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), raw,
                 hvd.callbacks.MetricAverageCallback(), averaged]
    base_lr = float(np.asarray(opt.learning_rate))
    if warmup:
        callbacks.insert(1, hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=base_lr, warmup_epochs=warmup, momentum_correction=False, verbose=1))
    if checkpoint:
        callbacks.append(hvd.callbacks.BestModelCheckpoint(monitor="val_loss", filepath=checkpoint))
    model.fit(shard(x, R), shard(y, R), batch_size=B, epochs=epochs, shuffle=False, verbose=0,
              validation_data=(shard(xv, R), shard(yv, R)), callbacks=callbacks)
    check(f"{name}.compiled", not model.run_eagerly)
    # learning rate per batch (warmup formula, then constant)
    expected_lrs = []
    for e in range(epochs):
        for b in range(STEPS):
            if e < warmup:
                frac = e + (b + 1) / STEPS  # Horovod's: the last warmup batch at base_lr
                expected_lrs.append(base_lr / N * (frac * (N - 1) / warmup + 1))
            else:
                expected_lrs.append(expected_lrs[-1] if expected_lrs else base_lr)
    check(f"{name}.lr_per_batch", np.allclose(raw.lrs, expected_lrs, rtol=1e-6),
          f"{raw.lrs} vs {expected_lrs}")
    ref = reference(root_init, make_opt, x, y, epochs, expected_lrs, passes, average)
    for e in range(epochs):
        check(f"{name}.epoch{e}.identical_on_ranks", same_on_all_ranks(raw.weights[e]))
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(raw.weights[e], ref[e],
                                                                  strict=True))
        check(f"{name}.epoch{e}.matches_reference", diff < 2e-5, f"max abs diff {diff}")
    # metric averaging: the averaged logs are the mean of every rank's own logs
    everyone = hvd.allgather_object(raw.logs)
    for e in range(epochs):
        for key, value in averaged.logs[e].items():
            if key == "lr":
                continue
            mean = float(np.mean([logs[e][key] for logs in everyone]))
            check(f"{name}.metric_average.{key}.epoch{e}", abs(value - mean) < 1e-6,
                  f"{value} vs {mean}")
    check(f"{name}.iterations", int(np.asarray(model.optimizer.iterations))
          == epochs * STEPS)  # every batch (Horovod's non_aggregation_step counts too)
    return model


def sgd():
    return K.optimizers.SGD(learning_rate=0.5, momentum=0.9)


def adam():
    return K.optimizers.Adam(learning_rate=0.05)


ckpt = os.path.join(OUTDIR, f"best-{FLAVOUR}-rank{R}.keras")
model = run_case("sgd_warmup_sparse", sgd, epochs=2, warmup=2, checkpoint=ckpt)
run_case("adam_passes2_dense", adam, epochs=2, passes=2, average=True, sparse_as_dense=True)
run_case("sgd_passes2_sum", sgd, epochs=1, passes=2, average=False)
if FLAVOUR != "keras3":  # tf-keras' legacy OptimizerV2 classes are wrapped too
    # sparse_as_dense: legacy momentum updates only the rows present in an IndexedSlices
    # gradient, so sparse and dense (reference) gradients legitimately differ
    run_case("legacy_sgd", lambda: K.optimizers.legacy.SGD(learning_rate=0.5, momentum=0.9),
             epochs=1, sparse_as_dense=True)

# BestModelCheckpoint: only rank 0 wrote; load it everywhere and keep training in sync
hvd.barrier()
others = [os.path.exists(os.path.join(OUTDIR, f"best-{FLAVOUR}-rank{r}.keras")) for r in range(N)]
check("best_checkpoint.rank0_only", others == [True] + [False] * (N - 1), str(others))
loaded = hvd.load_model(os.path.join(OUTDIR, f"best-{FLAVOUR}-rank0.keras"))
check("load_model.wrapped", is_distributed_optimizer(loaded.optimizer),
      type(loaded.optimizer).__name__)
x, y = global_data(9, STEPS)
loaded.fit(shard(x, R), shard(y, R), batch_size=B, epochs=1, shuffle=False, verbose=0)
check("load_model.fit_in_sync", same_on_all_ranks(loaded.get_weights()))

# load_model of a model saved with a PLAIN optimizer wraps that optimizer, keeping its state
plain_path = os.path.join(OUTDIR, f"plain-{FLAVOUR}-rank{R}.keras")
plain = make_model(0)
plain.compile(optimizer=K.optimizers.SGD(0.1, momentum=0.5), loss=loss_fn())
plain.fit(shard(x, R)[:B], shard(y, R)[:B], batch_size=B, epochs=1, verbose=0)
plain.save(plain_path)
reloaded = hvd.load_model(plain_path)
check("load_model.wraps_plain", is_distributed_optimizer(reloaded.optimizer)
      and int(np.asarray(reloaded.optimizer.iterations)) == 1)
hvd.broadcast_global_variables(0)  # the models load_model returned
reloaded.fit(shard(x, R), shard(y, R), batch_size=B, epochs=1, shuffle=False, verbose=0)
check("load_model.plain_fit_in_sync", same_on_all_ranks(reloaded.get_weights()))

# broadcast_global_variables from a non-zero root
root = N - 1
if R != root:
    model.set_weights([w + 1.0 for w in model.get_weights()])
expected = hvd.broadcast_object(model.get_weights(), root_rank=root)
hvd.broadcast_global_variables(root, model)
check("broadcast_global_variables.root_last",
      all(np.array_equal(a, b) for a, b in zip(model.get_weights(), expected, strict=True)))

# hvdcore.keras is an alias: the same objects
import hvdcore.keras as hvd_alias  # noqa: E402
import hvdcore.keras.callbacks as alias_callbacks  # noqa: E402

check("alias.same_objects", hvd_alias.DistributedOptimizer is hvd.DistributedOptimizer
      and hvd_alias.callbacks.MetricAverageCallback is hvd.callbacks.MetricAverageCallback
      and alias_callbacks.BestModelCheckpoint is hvd.callbacks.BestModelCheckpoint
      and hvd_alias.allreduce is hvd.allreduce)

# a plain optimizer is rejected with a clear error, a wrapper cannot be wrapped twice
try:
    hvd.DistributedOptimizer(model.optimizer)
    raise AssertionError("double wrapping did not raise")
except ValueError as exc:
    check("error.double_wrap", "already" in str(exc))

hvd.barrier()
print(f"KERAS-FIT-OK flavour={FLAVOUR} rank={R} size={N}", flush=True)
