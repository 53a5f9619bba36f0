"""Horovod's Keras API details (issue 18) with Keras 3, or tf-keras when TF_USE_LEGACY_KERAS=1.

``mpirun -np N python tensorflow_keras_semantics.py TMPDIR``. Checks, against references
computed in this one process:
- ``get_config()`` -> ``from_config()`` -> ``get_config()`` gives the same config;
- ``register_local_var`` / ``PartialDistributedOptimizer(local_layers=...)``: one compiled fit
  step updates shared weights with the rank-averaged gradient and local weights with this rank's
  gradient (divided by the set size unless ``scale_local_gradients=False``), as Horovod;
- ``BroadcastGlobalVariablesCallback(0, local_variables=...)`` leaves local variables alone;
- ``ModelCheckpoint`` writes ``.h5`` and ``.keras`` and ``hvd.load_model`` restores weights,
  optimizer state and the DistributedOptimizer; the loaded model trains on.
Prints ``CHECK <flavour>.<name> ok`` (rank 0) and ``KERAS-SEMANTICS-OK flavour=F`` per rank.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow.keras as hvd  # noqa: E402
from hvdcore.tensorflow.keras import flavours as hvd_flavours  # noqa: E402

tf.get_logger().setLevel("ERROR")
K = tf.keras
# tf_keras: TF_USE_LEGACY_KERAS=1 on TensorFlow >= 2.16; keras2: the Keras 2 of TensorFlow <= 2.15
FLAVOUR = ("tf_keras" if K.__name__.startswith("tf_keras")
           else "keras2" if hvd_flavours.keras_major() < 3 else "keras3")
hvd.init()
R, N = hvd.rank(), hvd.size()
TMP = os.path.join(sys.argv[1], f"rank{R}")
os.makedirs(TMP, exist_ok=True)


def check(name: str, ok: bool, detail: object = "") -> None:
    if not ok:
        raise AssertionError(f"rank {R}: check {FLAVOUR}.{name} failed {detail}")
    if R == 0:
        print(f"CHECK {FLAVOUR}.{name} ok", flush=True)


def close(a: object, b: object, tol: float = 1e-5) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=tol, atol=tol))


# --- get_config / from_config round trip ----------------------------------------------------
inners = [K.optimizers.Adam(0.01), K.optimizers.SGD(0.1, momentum=0.9)]
if FLAVOUR != "keras3":
    inners.append(K.optimizers.legacy.Adam(0.01))
for inner in inners:
    wrapped = hvd.DistributedOptimizer(inner, backward_passes_per_step=2)
    config = wrapped.get_config()
    again = type(wrapped).from_config(config).get_config()
    label = f"{type(inner).__module__.split('.')[-2]}.{type(inner).__name__}"
    check(f"config_round_trip.{label}",
          again == config and config["optimizer"]["class_name"] == type(inner).__name__,
          (config, again))

# --- local variables: register_local_var, PartialDistributedOptimizer ------------------------
rng = np.random.RandomState(0)
INIT = [rng.randn(3, 4).astype(np.float32), rng.randn(4).astype(np.float32),
        rng.randn(4, 1).astype(np.float32), rng.randn(1).astype(np.float32)]
LR = 0.1


def data(r: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.RandomState(10 + r)
    return g.randn(4, 3).astype(np.float32), g.randn(4, 1).astype(np.float32)


def make_model() -> K.Model:
    model = K.Sequential([K.Input((3,)), K.layers.Dense(4), K.layers.Dense(1)])
    model.set_weights(INIT)
    return model


def local_grads(r: int) -> list[np.ndarray]:
    model = make_model()
    x, y = data(r)
    with tf.GradientTape() as tape:
        loss = K.losses.MeanSquaredError()(y, model(x))
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


GRADS = [local_grads(r) for r in range(N)]
MEAN = [np.mean([GRADS[r][k] for r in range(N)], axis=0) for k in range(4)]
LOCAL = {2, 3}  # the second Dense layer's kernel and bias


def one_step(make_opt, scale: float) -> list[np.ndarray]:
    model = make_model()
    model.compile(optimizer=make_opt(model), loss=K.losses.MeanSquaredError())
    x, y = data(R)
    model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    want = [INIT[k] - LR * (GRADS[R][k] * scale if k in LOCAL else MEAN[k]) for k in range(4)]
    return model.get_weights(), want


def partial(model: K.Model):
    return hvd.PartialDistributedOptimizer(K.optimizers.SGD(LR), local_layers=[model.layers[1]])


def registered(model: K.Model):
    opt = hvd.DistributedOptimizer(K.optimizers.SGD(LR), scale_local_gradients=False)
    for var in model.layers[1].trainable_weights:
        opt.register_local_var(var)
    return opt


for label, make_opt, scale in (("partial_optimizer", partial, 1.0 / N),
                               ("register_local_var.unscaled", registered, 1.0)):
    got, want = one_step(make_opt, scale)
    check(f"{label}.one_step", all(close(g, w) for g, w in zip(got, want, strict=True)),
          (got, want))

# --- BroadcastGlobalVariablesCallback(local_variables=...) ----------------------------------
model = make_model()
model.set_weights([w + R for w in INIT])
model.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.SGD(LR)),
              loss=K.losses.MeanSquaredError())
callback = hvd.callbacks.BroadcastGlobalVariablesCallback(
    0, local_variables=model.layers[1].trainable_weights)
callback.set_model(model)
callback.on_train_begin()
got = model.get_weights()
check("broadcast_callback.local_variables",
      close(got[0], INIT[0]) and close(got[1], INIT[1])
      and close(got[2], INIT[2] + R) and close(got[3], INIT[3] + R), got)

# --- saving: ModelCheckpoint .h5 / .keras, hvd.load_model ------------------------------------
# one model per format: Keras 3's legacy .h5 writer drops the optimizer from the model's live
# compile config (keras/src/legacy/saving/saving_utils.py model_metadata), so a later .keras
# save of the same model would lose its optimizer (plain Keras optimizers too)
x_all, y_all = data(R)
for ext in ("h5", "keras"):
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.Adam(0.01)),
                  loss=K.losses.MeanSquaredError())
    pattern = os.path.join(TMP, "checkpoint-{epoch}." + ext)
    model.fit(x_all, y_all, batch_size=2, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         K.callbacks.ModelCheckpoint(pattern)])
    path = pattern.format(epoch=1)
    loaded = hvd.load_model(path)
    opt = loaded.optimizer
    check(f"save.{ext}.load_model",
          type(opt).__name__.endswith("DistributedOptimizer")
          and type(opt.inner_optimizer).__name__ == "Adam"
          and int(opt.iterations.numpy()) == 2
          and all(close(a, b) for a, b in zip(loaded.get_weights(), model.get_weights(),
                                              strict=True)),
          (type(opt), int(opt.iterations.numpy())))
    saved_state = [np.asarray(v) for v in model.optimizer.variables]
    loaded_state = [np.asarray(v) for v in loaded.optimizer.variables]
    if FLAVOUR == "keras3" and ext == "h5":
        # Keras 3's .h5 loader builds the optimizer with no model variables, so it restores
        # only the leading variables (iterations, learning rates), plain optimizers included
        saved_state, loaded_state = saved_state[:4], loaded_state[:4]
    check(f"save.{ext}.optimizer_state",
          len(saved_state) == len(loaded_state)
          and all(close(a, b) for a, b in zip(saved_state, loaded_state, strict=True)),
          (len(saved_state), len(loaded_state)))
    loaded.fit(x_all, y_all, batch_size=2, epochs=1, verbose=0)
    weights = np.concatenate([w.ravel() for w in loaded.get_weights()])
    everyone = hvd.allgather_object(weights.tolist())
    check(f"save.{ext}.trains_on_in_sync",
          int(loaded.optimizer.iterations.numpy()) == 4
          and all(close(w, everyone[0]) for w in everyone))

hvd.shutdown()
print(f"KERAS-SEMANTICS-OK flavour={FLAVOUR} rank={R}", flush=True)
