"""A ``.keras`` file holding ``hvd.SyncBatchNormalization`` moves between Keras backends.

``KERAS_BACKEND=B python keras_sync_bn_across.py save|load PATH`` (one process). ``save`` trains
Dense -> SyncBatchNormalization -> Dense one step (plain SGD) and saves the model to PATH and its weights to
PATH.npy; ``load`` is a fresh process (no SyncBatchNormalization made before) that loads PATH with
``hvd.load_model``, checks the layer is hvdcore's on this backend with the saved weights, and
trains one more step. Prints ``SYNC-BN-ACROSS-OK mode=M backend=B``.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import hvdcore.keras as hvd  # noqa: E402

BACKEND = keras.backend.backend()
mode, path = sys.argv[1], sys.argv[2]
hvd.init()
rng = np.random.RandomState(5)
x, y = rng.randn(8, 3).astype(np.float32), rng.randn(8, 1).astype(np.float32)


def flat(model: keras.Model) -> np.ndarray:
    return np.concatenate([np.asarray(keras.ops.convert_to_numpy(w)).ravel()
                           for w in model.get_weights()])


if mode == "save":
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4),
                              hvd.SyncBatchNormalization(momentum=0.3), keras.layers.Dense(1)])
    # a plain optimizer (hvd.load_model wraps it): TensorFlow's loader does not take the
    # DistributedOptimizer a torch or JAX model saves
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    model.save(path)
    np.save(path + ".npy", flat(model))
else:
    model = hvd.load_model(path)
    layer = model.layers[1]
    assert type(layer).__name__ == "SyncBatchNormalization", type(layer)
    assert type(layer).__module__.startswith("hvdcore."), type(layer).__module__
    assert np.allclose(flat(model), np.load(path + ".npy")), "weights changed in the round trip"
    before = flat(model)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert not np.allclose(flat(model), before), "the loaded model did not train"
print(f"SYNC-BN-ACROSS-OK mode={mode} backend={BACKEND}", flush=True)
