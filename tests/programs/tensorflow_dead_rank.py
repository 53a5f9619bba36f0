"""Rank 1 dies in the middle of a compiled Keras fit; the job must end (not hang).

Run with ``mpirun -np 2``. Rank 1 exits with code 17 at the start of batch 3; rank 0 is then
waiting in the gradient allreduce of a compiled train step.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow.keras as hvd  # noqa: E402

tf.get_logger().setLevel("ERROR")
K = tf.keras
hvd.init()


class DieOnRank1(K.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if hvd.rank() == 1 and batch == 3:
            print("rank 1 exiting now", flush=True)
            os._exit(17)


model = K.Sequential([K.Input((4,)), K.layers.Dense(2)])
model.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.SGD(0.1)), loss="mse")
x = np.ones((64, 4), np.float32)
model.fit(x, x[:, :2], batch_size=4, epochs=1, verbose=0, callbacks=[DieOnRank1()])
print(f"UNEXPECTED: rank {hvd.rank()} finished training", flush=True)
