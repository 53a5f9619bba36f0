"""An elastic Keras 3 job on the torch or JAX backend (``KERAS_BACKEND``), for
tests/test_elastic_keras_backends.py: ``model.fit`` with hvdcore.keras' DistributedOptimizer,
``hvd.elastic.KerasState`` and the elastic callbacks, driven by a plan (env ELASTIC_PLAN, JSON;
keys as in elastic_keras.py: ``epochs``, ``steps``, ``commit_every``, ``expect``, ``fail``,
``progress``).

Each epoch is ``steps`` batches of Dense(4 -> 1) on the same input on every rank, committed
every ``commit_every`` batches (counted across epochs, as Horovod's callback does) and at each
epoch's end; a partial epoch is resumed by a ``fit`` of its remaining batches. The callbacks
include ``BroadcastGlobalVariablesCallback`` (survivors must broadcast with new workers). The
bias is a local variable (``register_local_var``: its gradient divided by the size). The weights
start at fixed values (not the backend's random numbers), so the test computes the
reference in NumPy. Printed (one ``os.write`` per line): ``START rank r size n epoch e batch b
host h`` when the elastic function starts, ``EPOCH e rank r size n host h``, ``DONE rank r size
n steps s epoch e w <weights>`` (``steps``: the optimizer's iterations) at the end.
"""

import json
import os
import signal
import sys
import time

import keras
import numpy as np

import hvdcore.keras as hvd

plan = json.loads(os.environ["ELASTIC_PLAN"])
host = os.environ.get("HOROVOD_HOSTNAME", "?")
STEPS, EPOCHS, EVERY = plan["steps"], plan["epochs"], plan.get("commit_every", 1)
X, Y = np.ones((2 * STEPS, 4), np.float32), np.zeros((2 * STEPS, 1), np.float32)


def say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def fail_now(epoch: int, batch: int) -> None:
    for f in plan.get("fail", []):
        if f["epoch"] != epoch or f["batch"] != batch or f["host"] not in ("*", host):
            continue
        if os.path.exists(f["once"]):
            continue
        open(f["once"], "w").close()
        if f["how"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"planned failure on {host} at epoch {epoch} batch {batch}")


def epoch_begins(state) -> None:
    """Publish the progress, wait for the expected size (committing: a host change raises
    HostsUpdatedInterrupt here), then announce the epoch."""
    epoch = state.epoch
    if hvd.rank() == 0:
        with open(plan["progress"] + ".tmp", "w") as f:
            f.write(str(epoch))
        os.replace(plan["progress"] + ".tmp", plan["progress"])
    want = plan.get("expect", {}).get(str(epoch))
    deadline = time.monotonic() + 90
    while want is not None and hvd.size() != want:
        if time.monotonic() > deadline:
            raise SystemExit(f"epoch {epoch}: size {hvd.size()}, expected {want}")
        time.sleep(0.1)
        state.commit()
    say(f"EPOCH {epoch} rank {hvd.rank()} size {hvd.size()} host {host}")


hvd.init()
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.set_weights([np.full((4, 1), 0.1, np.float32), np.zeros((1,), np.float32)])
# the bias is a local variable: its gradient divided by the job's size (2) at each step, read
# when the (jitted, on JAX) step runs, as an elastic job must
optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01))
optimizer.register_local_var(model.layers[0].bias)
model.compile(optimizer=optimizer, loss="mse")
state = hvd.elastic.KerasState(model, epoch=0, batch=0)


class Plan(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if state.batch == 0:
            epoch_begins(state)

    def on_train_batch_end(self, batch, logs=None):
        fail_now(state.epoch, state.batch)  # UpdateBatchStateCallback ran before


# Horovod's broadcast callback too: each generation's first fit broadcasts on every rank
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
             hvd.elastic.UpdateEpochStateCallback(state),
             hvd.elastic.UpdateBatchStateCallback(state), Plan(),
             hvd.elastic.CommitStateCallback(state, batches_per_commit=EVERY)]


@hvd.elastic.run
def train(state):
    say(f"START rank {hvd.rank()} size {hvd.size()} epoch {state.epoch} batch {state.batch} "
        f"host {host}")
    if state.batch:
        rest = 2 * (STEPS - state.batch)
        model.fit(X[:rest], Y[:rest], batch_size=2, shuffle=False, initial_epoch=state.epoch,
                  epochs=state.epoch + 1, callbacks=callbacks, verbose=0)
    if state.epoch < EPOCHS:
        model.fit(X, Y, batch_size=2, shuffle=False, initial_epoch=state.epoch, epochs=EPOCHS,
                  callbacks=callbacks, verbose=0)
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


steps = train(state)
w = ",".join(f"{v:.6f}" for v in np.concatenate([np.ravel(keras.ops.convert_to_numpy(v))
                                                  for v in model.weights]))
say(f"DONE rank {hvd.rank()} size {hvd.size()} steps {steps} epoch {state.epoch} w {w}")
hvd.shutdown()
sys.exit(0)
