"""hvdcore.keras' API details on the Keras backend in use, against references in one process.

``KERAS_BACKEND=torch|jax mpirun -np N python keras_backend_semantics.py TMPDIR``; the structure of
tensorflow_keras_semantics.py. One compiled-fit SGD step of a two-layer model has a closed form
(w - lr * g), so each case compares with the gradients of every rank computed here:

- ``get_config()`` -> ``from_config()`` -> ``get_config()`` gives the same config;
- ``PartialDistributedOptimizer(local_layers=...)`` and ``register_local_var`` (scaled and not):
  shared weights take the rank average, local weights this rank's gradient (/ size);
- ``op=Sum``, ``gradient_predivide_factor``, and a process set of the first N-1 ranks (N > 1;
  the last rank stays out and its weights are untouched);
- ``BroadcastGlobalVariablesCallback(0, local_variables=...)`` leaves local variables alone;
- ``LearningRateScheduleCallback`` (staircase) sets initial_lr * multiplier(epoch);
- ``ModelCheckpoint`` .keras -> ``hvd.load_model``: weights, optimizer state (iterations and
  slots) and the DistributedOptimizer come back, and the loaded model trains on in sync;
- ``SyncBatchNormalization``: on unequal batches, the moving statistics and outputs of Horovod's
  arithmetic (the ranks' moments weigh alike); between two Dense layers, two compiled-fit SGD
  steps equal plain Keras ``BatchNormalization`` trained in one process on the union of the
  ranks' batches (the first layer's gradient needs the allreduce's gradient), and the model
  saves and loads as SyncBatchNormalization.
Prints ``CHECK <backend>.<name> ok`` (rank 0) and
``KERAS-BACKEND-SEMANTICS-OK backend=B rank=R size=N``.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import hvdcore.keras as hvd  # noqa: E402

BACKEND = keras.backend.backend()
hvd.init()
R, N = hvd.rank(), hvd.size()
TMP = os.path.join(sys.argv[1], f"rank{R}")
os.makedirs(TMP, exist_ok=True)


def check(name: str, ok: bool, detail: object = "") -> None:
    if not ok:
        raise AssertionError(f"rank {R}: check {BACKEND}.{name} failed {detail}")
    if R == 0:
        print(f"CHECK {BACKEND}.{name} ok", flush=True)


def close(a: object, b: object, tol: float = 1e-5) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=tol, atol=tol))


def numpy(value: object) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(value))


# --- get_config / from_config round trip ----------------------------------------------------
for inner in (keras.optimizers.Adam(0.01), keras.optimizers.SGD(0.1, momentum=0.9)):
    wrapped = hvd.DistributedOptimizer(inner, backward_passes_per_step=2)
    config = wrapped.get_config()
    again = type(wrapped).from_config(config).get_config()
    check(f"config_round_trip.{type(inner).__name__}",
          again == config and config["optimizer"]["class_name"] == type(inner).__name__
          and config["backward_passes_per_step"] == 2, (config, again))

# --- one SGD step with a closed form ----------------------------------------------------------
rng = np.random.RandomState(0)
INIT = [rng.randn(3, 4).astype(np.float32), rng.randn(4).astype(np.float32),
        rng.randn(4, 1).astype(np.float32), rng.randn(1).astype(np.float32)]
LR = 0.1


def data(r: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.RandomState(10 + r)
    return g.randn(4, 3).astype(np.float32), g.randn(4, 1).astype(np.float32)


def make_model() -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.set_weights(INIT)
    return model


def local_grads(r: int) -> list[np.ndarray]:
    """Rank r's gradients: 2/n * X^T (XW - y) chains, computed by hand for the two layers."""
    x, y = (a.astype(np.float64) for a in data(r))
    w1, b1, w2, b2 = (a.astype(np.float64) for a in INIT)
    h = x @ w1 + b1
    d = 2.0 * (h @ w2 + b2 - y) / y.size
    dh = d @ w2.T
    return [x.T @ dh, dh.sum(0), h.T @ d, d.sum(0)]


GRADS = [local_grads(r) for r in range(N)]
LOCAL = {2, 3}  # the second Dense layer's kernel and bias


def one_step(opt_of, want_grads) -> tuple[list[np.ndarray], list[np.ndarray]]:
    model = make_model()
    model.compile(optimizer=opt_of(model), loss=keras.losses.MeanSquaredError())
    x, y = data(R)
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return model.get_weights(), [INIT[k] - LR * want_grads[k] for k in range(4)]


def mean(ranks, k):
    return np.mean([GRADS[r][k] for r in ranks], axis=0)


def partial(model):
    return hvd.PartialDistributedOptimizer(keras.optimizers.SGD(LR),
                                           local_layers=[model.layers[1]])


def registered(model):
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR), scale_local_gradients=False)
    for var in model.layers[1].trainable_weights:
        opt.register_local_var(var)
    return opt


ALL = range(N)
cases = [
    ("partial_optimizer", partial,
     [GRADS[R][k] / N if k in LOCAL else mean(ALL, k) for k in range(4)]),
    ("register_local_var.unscaled", registered,
     [GRADS[R][k] if k in LOCAL else mean(ALL, k) for k in range(4)]),
    ("op_sum", lambda m: hvd.DistributedOptimizer(keras.optimizers.SGD(LR), op=hvd.Sum),
     [mean(ALL, k) * N for k in range(4)]),
    ("gradient_predivide_factor", lambda m: hvd.DistributedOptimizer(
        keras.optimizers.SGD(LR), gradient_predivide_factor=2.5),
     [mean(ALL, k) for k in range(4)]),
]
for label, opt_of, want_grads in cases:
    got, want = one_step(opt_of, want_grads)
    check(f"{label}.one_step", all(close(g, w) for g, w in zip(got, want, strict=True)),
          (got, want))

# a process set of the first N-1 ranks: they average among themselves, the last rank stays out
if N > 1:
    subset = hvd.add_process_set(list(range(N - 1)))
    if R < N - 1:
        got, want = one_step(lambda m: hvd.DistributedOptimizer(keras.optimizers.SGD(LR),
                                                                process_set=subset),
                             [mean(range(N - 1), k) for k in range(4)])
        check("process_set.one_step", all(close(g, w) for g, w in zip(got, want, strict=True)),
              (got, want))
    hvd.remove_process_set(subset)

# --- BroadcastGlobalVariablesCallback(local_variables=...) ----------------------------------
model = make_model()
model.set_weights([w + R for w in INIT])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)),
              loss=keras.losses.MeanSquaredError())
callback = hvd.callbacks.BroadcastGlobalVariablesCallback(
    0, local_variables=model.layers[1].trainable_weights)
callback.set_model(model)
callback.on_train_begin()
got = model.get_weights()
check("broadcast_callback.local_variables",
      close(got[0], INIT[0]) and close(got[1], INIT[1])
      and close(got[2], INIT[2] + R) and close(got[3], INIT[3] + R), got)

# --- LearningRateScheduleCallback, staircase ----------------------------------------------
seen: list[float] = []
model = make_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)),
              loss=keras.losses.MeanSquaredError())


class Probe(keras.callbacks.Callback):
    """The learning rate after every batch (through self.model: on JAX that syncs the state)."""

    def on_train_batch_end(self, batch, logs=None):
        seen.append(float(numpy(self.model.optimizer.learning_rate)))


probe = Probe()
x_all, y_all = data(R)
model.fit(x_all, y_all, batch_size=2, epochs=3, shuffle=False, verbose=0, callbacks=[
    # a constant multiplier is Horovod's exponential decay: initial_lr * 0.5 ** epoch
    hvd.callbacks.LearningRateScheduleCallback(0.4, 0.5, start_epoch=1), probe])
check("lr_schedule.staircase", np.allclose(seen, [LR, LR, 0.2, 0.2, 0.1, 0.1]), seen)

# --- saving: ModelCheckpoint .keras, hvd.load_model ----------------------------------------
model = make_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)),
              loss=keras.losses.MeanSquaredError())
pattern = os.path.join(TMP, "checkpoint-{epoch}.keras")
model.fit(x_all, y_all, batch_size=2, epochs=1, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                     keras.callbacks.ModelCheckpoint(pattern)])
loaded = hvd.load_model(pattern.format(epoch=1))
opt = loaded.optimizer
check("save.keras.load_model",
      type(opt).__name__.endswith("DistributedOptimizer")
      and type(opt.inner_optimizer).__name__ == "Adam" and int(numpy(opt.iterations)) == 2
      and all(close(a, b) for a, b in zip(loaded.get_weights(), model.get_weights(),
                                          strict=True)), (type(opt), int(numpy(opt.iterations))))
saved_state = [numpy(v) for v in model.optimizer.variables]
loaded_state = [numpy(v) for v in loaded.optimizer.variables]
check("save.keras.optimizer_state",
      len(saved_state) == len(loaded_state)
      and all(close(a, b) for a, b in zip(saved_state, loaded_state, strict=True)),
      (len(saved_state), len(loaded_state)))
loaded.fit(x_all, y_all, batch_size=2, epochs=1, verbose=0)
weights = np.concatenate([w.ravel() for w in loaded.get_weights()])
everyone = hvd.allgather_object(weights.tolist())
check("save.keras.trains_on_in_sync",
      int(numpy(loaded.optimizer.iterations)) == 4 and all(close(w, everyone[0])
                                                           for w in everyone))

# --- SyncBatchNormalization ------------------------------------------------------------------
# Horovod's arithmetic on unequal batches (rank r has r + 2 rows): every rank's moments weigh
# alike, which is not the union's moments
rows = [np.random.RandomState(30 + r).randn(r + 2, 3).astype(np.float32) * (r + 1) + r
        for r in range(N)]
means = [x.astype(np.float64).mean(0) for x in rows]
group_mean = np.mean(means, axis=0)
group_var = np.mean([x.astype(np.float64).var(0) + m ** 2 for x, m in zip(rows, means,
                                                                           strict=True)],
                    axis=0) - group_mean ** 2
layer = hvd.SyncBatchNormalization(momentum=0.0, epsilon=1e-3)
out = numpy(layer(rows[R], training=True))
check("sync_batch_norm.horovod_moments",
      close(numpy(layer.moving_mean), group_mean, 1e-4)
      and close(numpy(layer.moving_variance), group_var, 1e-4)
      and close(out, (rows[R] - group_mean) / np.sqrt(group_var + 1e-3), 1e-4),
      (numpy(layer.moving_mean), group_mean))

BN_INIT = [rng.randn(3, 4).astype(np.float32), rng.randn(4).astype(np.float32)]


def bn_model(norm: keras.layers.Layer) -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), norm,
                              keras.layers.Dense(1)])
    model.layers[0].set_weights(BN_INIT)  # the normalization keeps its initial weights
    model.layers[2].set_weights(INIT[2:])
    return model


synced = bn_model(hvd.SyncBatchNormalization(momentum=0.5))
synced.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)),
               loss=keras.losses.MeanSquaredError())
synced.fit(*data(R), batch_size=4, epochs=2, shuffle=False, verbose=0)
union = bn_model(keras.layers.BatchNormalization(momentum=0.5))
union.compile(optimizer=keras.optimizers.SGD(LR), loss=keras.losses.MeanSquaredError())
union.fit(np.concatenate([data(r)[0] for r in range(N)]),
          np.concatenate([data(r)[1] for r in range(N)]), batch_size=4 * N, epochs=2,
          shuffle=False, verbose=0)
got, want = synced.get_weights(), union.get_weights()
check("sync_batch_norm.fit_equals_union_batch",
      all(close(g, w, 1e-4) for g, w in zip(got, want, strict=True)), (got, want))
path = os.path.join(TMP, "sync_bn.keras")
synced.save(path)
loaded = hvd.load_model(path)
check("sync_batch_norm.save_load",
      type(loaded.layers[1]) is hvd.SyncBatchNormalization
      and all(close(a, b) for a, b in zip(loaded.get_weights(), got, strict=True)))

hvd.barrier()
print(f"KERAS-BACKEND-SEMANTICS-OK backend={BACKEND} rank={R} size={N}", flush=True)
