"""hvdcore.keras' model.fit on the Keras backend in use (KERAS_BACKEND), against one process.

``KERAS_BACKEND=torch|jax mpirun -np N python keras_backend_fit.py OUTDIR`` (tensorflow too).
The structure of tensorflow_keras_fit.py, written with Keras 3 alone: gradients for the
single-process reference come from the backend's autodiff. Checks:

- the issue's repro (init, DistributedOptimizer(SGD), compile, fit on a one-layer model) trains;
- weights identical on every rank after every epoch and equal (to tolerance) to ONE process
  trained on the concatenated per-rank batches, same per-batch learning rate and accumulation:
  SGD with momentum under LearningRateWarmupCallback, Adam with backward_passes_per_step=2
  averaged, SGD with 2 passes summed, fp16 compression (looser tolerance);
- MetricAverageCallback's logs are the mean of the ranks' logs; BroadcastGlobalVariablesCallback
  syncs models that start different; iterations count every batch (Horovod);
- BestModelCheckpoint writes only on rank 0; load_model returns a wrapped optimizer and training
  continues in sync (also for a model saved with a plain optimizer); broadcast_global_variables
  from the last rank;
- wrapping twice is an error (the backend mixes: keras_backend_errors.py, one process).

Prints ``KERAS-BACKEND-FIT-OK backend=B rank=R size=N``.
"""

from __future__ import annotations

import contextlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import hvdcore.keras as hvd  # noqa: E402
from hvdcore.keras.optimizer import is_distributed_optimizer  # noqa: E402

BACKEND = keras.backend.backend()
OUTDIR = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()
B, STEPS, VOCAB = 4, 4, 10


def check(name: str, ok: bool, detail: object = "") -> None:
    if not ok:
        raise AssertionError(f"[{BACKEND}] rank {R}: check {name} failed {detail}")
    if R == 0:
        print(f"CHECK {BACKEND}.{name} ok", flush=True)


# --- the issue's repro: a one-layer model trains (it crashed inside Keras' torch optimizer) --
repro = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
repro.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
history = repro.fit(np.ones((8, 2), np.float32) * (R + 1), np.ones((8, 1), np.float32),
                    batch_size=4, epochs=1, verbose=0)
check("issue_repro.fit", np.isfinite(history.history["loss"][0]))


def make_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((3,), dtype="int32"),
        keras.layers.Embedding(VOCAB, 4),
        keras.layers.Flatten(),
        keras.layers.Dense(8, activation="tanh"),
        keras.layers.Dense(3),
    ])


def global_data(seed: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VOCAB, size=(steps * N * B, 3)).astype(np.int32)
    return x, (x.sum(axis=1) % 3).astype(np.int32)


def shard(arr: np.ndarray, rank: int) -> np.ndarray:
    """Rank's rows: in global batch k (N*B rows) rank r owns rows [r*B, (r+1)*B)."""
    batches = arr.reshape(-1, N * B, *arr.shape[1:])
    return batches[:, rank * B:(rank + 1) * B].reshape(-1, *arr.shape[1:])


def loss_fn() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def gradients(model: keras.Model, xb: np.ndarray, yb: np.ndarray) -> list[np.ndarray]:
    """This process's gradients of the loss on one batch, by the backend's autodiff."""
    variables = model.trainable_variables
    if BACKEND == "torch":
        import torch

        loss = loss_fn()(keras.ops.convert_to_tensor(yb),
                         model(keras.ops.convert_to_tensor(xb), training=True))
        grads = torch.autograd.grad(loss, [v.value for v in variables])
        return [g.detach().cpu().numpy().astype(np.float64) for g in grads]
    if BACKEND == "jax":
        import jax

        fixed = [v.value for v in model.non_trainable_variables]

        def loss_of(trainable):
            pred, _ = model.stateless_call(trainable, fixed, xb, training=True)
            return loss_fn()(yb, pred)

        grads = jax.grad(loss_of)([v.value for v in variables])
        return [np.asarray(g, dtype=np.float64) for g in grads]
    import tensorflow as tf

    with tf.GradientTape() as tape:
        loss = loss_fn()(yb, model(xb, training=True))
    return [tf.convert_to_tensor(g).numpy().astype(np.float64)
            for g in tape.gradient(loss, variables)]


def no_grad():
    if BACKEND == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()


class Recorder(keras.callbacks.Callback):
    """Weights after every epoch, learning rate at every batch, logs at epoch end."""

    def __init__(self) -> None:
        super().__init__()
        self.weights: list[list[np.ndarray]] = []
        self.lrs: list[float] = []
        self.logs: list[dict[str, float]] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.lrs.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append([np.array(w) for w in self.model.get_weights()])
        self.logs.append({k: float(np.asarray(v)) for k, v in (logs or {}).items()})


def reference(init, make_opt, x, y, epochs, lrs, passes, average):
    """One process, batches of N*B rows, the same learning rate per batch and accumulation."""
    model = make_model(0)
    model.set_weights(init)
    opt = make_opt()
    variables = model.trainable_variables
    acc = [np.zeros(v.shape, np.float64) for v in variables]
    per_epoch, step = [], 0
    for _ in range(epochs):
        for k in range(len(x) // (N * B)):
            rows = slice(k * N * B, (k + 1) * N * B)
            acc = [a + g for a, g in zip(acc, gradients(model, x[rows], y[rows]), strict=True)]
            opt.learning_rate = lrs[step]
            step += 1
            if step % passes == 0:
                apply = [keras.ops.convert_to_tensor((a / passes if average else a)
                                                     .astype(np.float32)) for a in acc]
                with no_grad():
                    opt.apply(apply, variables)
                acc = [np.zeros_like(a) for a in acc]
            else:  # Horovod counts a step that only accumulates (Adam's bias correction sees it)
                opt.iterations.assign(opt.iterations + 1)
        per_epoch.append([np.array(w) for w in model.get_weights()])
    return per_epoch


def same_on_all_ranks(weights: list[np.ndarray]) -> bool:
    everyone = hvd.allgather_object(weights)
    return all(np.array_equal(a, b) for other in everyone for a, b in zip(other, weights,
                                                                             strict=True))


def run_case(name, make_opt, epochs, passes=1, average=False, warmup=0, checkpoint=None,
             tol=2e-5, **options):
    model = make_model(1000 + R)  # different on every rank: the broadcast callback syncs it
    root_init = hvd.broadcast_object(model.get_weights(), root_rank=0)
    opt = hvd.DistributedOptimizer(make_opt(), backward_passes_per_step=passes,
                                   average_aggregated_gradients=average, **options)
    model.compile(optimizer=opt, loss=loss_fn(), metrics=["accuracy"])
    x, y = global_data(5, STEPS)
    xv, yv = global_data(6, 1)
    raw, averaged = Recorder(), Recorder()
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), raw,
                 hvd.callbacks.MetricAverageCallback(), averaged]
    base_lr = float(keras.ops.convert_to_numpy(opt.learning_rate))
    if warmup:
        callbacks.insert(1, hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=base_lr, warmup_epochs=warmup, momentum_correction=False, verbose=1))
    if checkpoint:
        callbacks.append(hvd.callbacks.BestModelCheckpoint(monitor="val_loss", filepath=checkpoint))
    model.fit(shard(x, R), shard(y, R), batch_size=B, epochs=epochs, shuffle=False, verbose=0,
              validation_data=(shard(xv, R), shard(yv, R)), callbacks=callbacks)
    expected_lrs: list[float] = []
    for e in range(epochs):
        for b in range(STEPS):
            if e < warmup:
                # Horovod's (LearningRateWarmupCallbackImpl): the last warmup batch at base_lr
                expected_lrs.append(base_lr / N * ((e + (b + 1) / STEPS) * (N - 1) / warmup + 1))
            else:
                expected_lrs.append(expected_lrs[-1] if expected_lrs else base_lr)
    check(f"{name}.lr_per_batch", np.allclose(raw.lrs, expected_lrs, rtol=1e-6),
          f"{raw.lrs} vs {expected_lrs}")
    ref = reference(root_init, make_opt, x, y, epochs, expected_lrs, passes, average)
    for e in range(epochs):
        check(f"{name}.epoch{e}.identical_on_ranks", same_on_all_ranks(raw.weights[e]))
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(raw.weights[e], ref[e],
                                                                  strict=True))
        check(f"{name}.epoch{e}.matches_reference", diff < tol, f"max abs diff {diff}")
    everyone = hvd.allgather_object(raw.logs)
    for e in range(epochs):
        for key, value in averaged.logs[e].items():
            if key != "lr":
                mean = float(np.mean([logs[e][key] for logs in everyone]))
                check(f"{name}.metric_average.{key}.epoch{e}", abs(value - mean) < 1e-6,
                      f"{value} vs {mean}")
    iterations = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    # every batch counts, those that only accumulate too (Horovod's non_aggregation_step)
    check(f"{name}.iterations", iterations == epochs * STEPS, iterations)
    return model


def sgd():
    return keras.optimizers.SGD(learning_rate=0.5, momentum=0.9)


def adam():
    return keras.optimizers.Adam(learning_rate=0.05)


ckpt = os.path.join(OUTDIR, f"best-{BACKEND}-rank{R}.keras")
model = run_case("sgd_warmup", sgd, epochs=2, warmup=2, checkpoint=ckpt)
run_case("adam_passes2_average", adam, epochs=2, passes=2, average=True)
run_case("sgd_passes2_sum", sgd, epochs=1, passes=2, average=False)
run_case("sgd_fp16", sgd, epochs=1, tol=5e-3, compression=hvd.Compression.fp16)

# BestModelCheckpoint: only rank 0 wrote; load it everywhere and keep training in sync
hvd.barrier()
written = [os.path.exists(os.path.join(OUTDIR, f"best-{BACKEND}-rank{r}.keras"))
           for r in range(N)]
check("best_checkpoint.rank0_only", written == [True] + [False] * (N - 1), written)
loaded = hvd.load_model(os.path.join(OUTDIR, f"best-{BACKEND}-rank0.keras"))
check("load_model.wrapped", is_distributed_optimizer(loaded.optimizer),
      type(loaded.optimizer).__name__)
x, y = global_data(9, STEPS)
loaded.fit(shard(x, R), shard(y, R), batch_size=B, epochs=1, shuffle=False, verbose=0)
check("load_model.fit_in_sync", same_on_all_ranks(loaded.get_weights()))

# a model saved with a PLAIN optimizer: load_model wraps that optimizer, keeping its state
plain_path = os.path.join(OUTDIR, f"plain-{BACKEND}-rank{R}.keras")
plain = make_model(0)
plain.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.5), loss=loss_fn())
plain.fit(shard(x, R)[:B], shard(y, R)[:B], batch_size=B, epochs=1, verbose=0)
plain.save(plain_path)
reloaded = hvd.load_model(plain_path)
check("load_model.wraps_plain", is_distributed_optimizer(reloaded.optimizer)
      and int(keras.ops.convert_to_numpy(reloaded.optimizer.iterations)) == 1)
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

# errors, before Keras runs anything
try:
    hvd.DistributedOptimizer(model.optimizer)
    raise AssertionError("double wrapping did not raise")
except ValueError as exc:
    check("error.double_wrap", "already" in str(exc), exc)
hvd.barrier()
print(f"KERAS-BACKEND-FIT-OK backend={BACKEND} rank={R} size={N}", flush=True)
