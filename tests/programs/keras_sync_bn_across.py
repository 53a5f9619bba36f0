"""A saved model with hvdcore's Keras classes loads in a fresh process, on any Keras backend.

``KERAS_BACKEND=B python keras_sync_bn_across.py save|load PATH`` (one process; with
``TF_USE_LEGACY_KERAS=1`` on tf-keras, PATH ending in ``.h5``). ``save`` trains
Dense -> SyncBatchNormalization -> Dense one step with ``hvd.DistributedOptimizer(SGD)`` and
saves the model to PATH and its weights to PATH.npy; ``load`` is a fresh process (no
SyncBatchNormalization nor DistributedOptimizer made before: both of TensorFlow's are made on
first use) that loads PATH with ``hvd.load_model``, checks the layer and the optimizer are
hvdcore's for this backend with the saved weights, and trains one more step. Prints
``SYNC-BN-ACROSS-OK mode=M backend=B``.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import hvdcore.keras as hvd  # noqa: E402

BACKEND = keras.backend.backend()
if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
    import tensorflow as tf

    K = tf.keras
    BACKEND = "tf_keras"
else:
    K = keras
mode, path = sys.argv[1], sys.argv[2]
hvd.init()
rng = np.random.RandomState(5)
x, y = rng.randn(8, 3).astype(np.float32), rng.randn(8, 1).astype(np.float32)


def flat(model) -> np.ndarray:
    return np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])


if mode == "save":
    model = K.Sequential([K.Input((3,)), K.layers.Dense(4),
                          hvd.SyncBatchNormalization(momentum=0.3), K.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.SGD(0.1)), loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    model.save(path)
    np.save(path + ".npy", flat(model))
else:
    model = hvd.load_model(path)
    layer, opt = model.layers[1], model.optimizer
    assert type(layer).__name__ == "SyncBatchNormalization", type(layer)
    assert type(layer).__module__.startswith("hvdcore."), type(layer).__module__
    assert type(opt).__name__.endswith("DistributedOptimizer"), type(opt)
    assert type(opt).__module__.startswith("hvdcore."), type(opt).__module__
    assert np.allclose(flat(model), np.load(path + ".npy")), "weights changed in the round trip"
    before = flat(model)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert not np.allclose(flat(model), before), "the loaded model did not train"
print(f"SYNC-BN-ACROSS-OK mode={mode} backend={BACKEND}", flush=True)
