"""An elastic TensorFlow job driven by a plan (env ELASTIC_PLAN, JSON), for
tests/test_elastic_tensorflow.py; the TensorFlow counterpart of tests/programs/elastic_torch.py.

``mode`` ``fit``: Keras ``model.fit`` with hvdcore's DistributedOptimizer, ``KerasState`` and the
elastic callbacks of ``hvdcore.tensorflow.keras`` (a partial epoch is resumed by a ``fit`` of its
remaining steps); ``loop``: a TF2 custom loop with ``DistributedGradientTape`` and
``hvdcore.tensorflow.elastic`` (``TensorFlowState``, ``run``); ``session``: the same model and
SGD built as a TF1-style graph (gradients averaged by ``hvd.allreduce``) run by a
``tf.compat.v1.Session``, with ``TensorFlowState(session=sess)``. Each epoch has
``steps`` steps of one Dense(1) layer on the same input on every rank, committed every
``commit_every`` steps and at the epoch's end (a failure between commits rolls steps back), so
the weights after N optimizer iterations equal a one-process reference of N steps.
Printed (one ``os.write`` per line): ``START rank r size n epoch e batch b host h`` when the
elastic function starts (after the sync), ``EPOCH e rank r size n host h`` when an epoch
starts, ``RESET rank r size n`` from the reset callback, ``DONE rank r size n steps s epoch e w
<weights>`` at the end (fit: then ``SIZES rank r n1,n2,...``, the size of each step kept; the
bias is a local variable there, its gradient divided by that size). Plan keys as in elastic_torch.py: ``epochs``, ``steps``, ``expect``
(sizes only), ``fail`` (tests/programs/elastic_faults.py: a scenario's plan means the same in
both programs), ``progress``; ``commit_every``; ``bcast_callback`` (fit: also Horovod's
BroadcastGlobalVariablesCallback, which every generation's first fit runs on every rank).
"""

import json
import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf
from elastic_faults import fail_now, say  # this directory: the plan's failures

import hvdcore.tensorflow as hvd_tf
import hvdcore.tensorflow.keras as hvd

plan = json.loads(os.environ["ELASTIC_PLAN"])
host = os.environ.get("HOROVOD_HOSTNAME", "?")
STEPS, EPOCHS, EVERY = plan["steps"], plan["epochs"], plan.get("commit_every", 1)
X, Y = np.ones((2, 4), np.float32), np.zeros((2, 1), np.float32)


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
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
sgd = keras.optimizers.SGD(0.01)

if plan["mode"] == "fit":
    # gradient_predivide_factor: the same average at any one size (x 1/2 before the sum, x 2/size
    # after), so the reference holds; a size fixed when the step was traced would not. The bias
    # is a local variable: its gradient is divided by the size each step runs at (``sizes``,
    # committed with the state), which the reference replays
    optimizer = hvd.DistributedOptimizer(sgd, gradient_predivide_factor=2.0)
    optimizer.register_local_var(model.layers[0].bias)
    model.compile(optimizer=optimizer, loss="mse")
    state = hvd.elastic.KerasState(model, epoch=0, batch=0, sizes=())
    data = tf.data.Dataset.from_tensors((X, Y)).repeat()

    class Plan(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if state.batch == 0:
                epoch_begins(state)

        def on_train_batch_end(self, batch, logs=None):
            # UpdateBatchStateCallback ran before: state.batch counts this step
            state.sizes = (*state.sizes, hvd.size())
            fail_now(plan, host, state.epoch, state.batch - 1)

    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state), Plan(),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=EVERY)]
    if plan.get("bcast_callback"):
        callbacks.insert(0, hvd.callbacks.BroadcastGlobalVariablesCallback(0))

    def iterations() -> int:
        return int(model.optimizer.iterations.numpy())

    @hvd.elastic.run
    def train(state):
        say(f"START rank {hvd.rank()} size {hvd.size()} epoch {state.epoch} batch "
            f"{state.batch} host {host}")
        if state.batch:
            model.fit(data, steps_per_epoch=STEPS - state.batch, initial_epoch=state.epoch,
                      epochs=state.epoch + 1, callbacks=callbacks, verbose=0)
        if state.epoch < EPOCHS:
            model.fit(data, steps_per_epoch=STEPS, initial_epoch=state.epoch, epochs=EPOCHS,
                      callbacks=callbacks, verbose=0)
        return iterations()
elif plan["mode"] == "loop":
    sgd.build(model.trainable_variables)
    state = hvd_tf.elastic.TensorFlowState(model.variables + sgd.variables, epoch=0, batch=0)

    def iterations() -> int:
        return int(sgd.iterations.numpy())

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(X, training=True) - Y))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        sgd.apply_gradients(zip(grads, model.trainable_variables, strict=True))
else:  # "session": the same model and SGD as a TF1-style graph run by a Session
    initial = [v.numpy() for v in model.weights]
    graph = tf.Graph()
    with graph.as_default():
        kernel, bias = (tf.compat.v1.Variable(v) for v in initial)
        count = tf.compat.v1.Variable(0, dtype=tf.int64)
        loss = tf.reduce_mean(tf.square(tf.matmul(X, kernel) + bias - Y))
        grads = [hvd_tf.allreduce(g) for g in tf.compat.v1.gradients(loss, [kernel, bias])]
        train_op = tf.group(kernel.assign_sub(0.01 * grads[0]),
                            bias.assign_sub(0.01 * grads[1]), count.assign_add(1))
        sess = tf.compat.v1.Session()
        sess.run(tf.compat.v1.global_variables_initializer())
    # variables=None: the graph's global variables (kernel, bias, count), as Horovod's
    state = hvd_tf.elastic.TensorFlowState(session=sess, epoch=0, batch=0)

    def iterations() -> int:
        return int(sess.run(count))

    def step():
        sess.run(train_op)

    def weights() -> list:
        return sess.run([kernel, bias])

if plan["mode"] != "fit":
    @hvd_tf.elastic.run
    def train(state):
        say(f"START rank {hvd.rank()} size {hvd.size()} epoch {state.epoch} batch "
            f"{state.batch} host {host}")
        while state.epoch < EPOCHS:
            if state.batch == 0:
                epoch_begins(state)
            for b in range(state.batch, STEPS):
                step()
                state.batch = b + 1
                fail_now(plan, host, state.epoch, b)
                if state.batch % EVERY == 0:
                    state.commit()
            state.epoch += 1
            state.batch = 0
            state.commit()
        return iterations()

state.register_reset_callbacks([lambda: say(f"RESET rank {hvd.rank()} size {hvd.size()}")])
steps = train(state)
final = weights() if plan["mode"] == "session" else [v.numpy() for v in model.weights]
w = ",".join(f"{v:.6f}" for v in np.concatenate([np.ravel(v) for v in final]))
say(f"DONE rank {hvd.rank()} size {hvd.size()} steps {steps} epoch {state.epoch} w {w}")
if plan["mode"] == "fit":
    say(f"SIZES rank {hvd.rank()} {','.join(map(str, state.sizes))}")
hvd.shutdown()
sys.exit(0)
