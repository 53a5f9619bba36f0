"""hvdcore.tensorflow and hvdcore.tensorflow.keras names and argument orders as Horovod 0.28.1's,
at any world size (each rank checks what it can compute alone):

1. ``is_homogeneous()`` (horovod/tensorflow/mpi_ops.py: ``_basics.is_homogeneous``, a bool):
   True on one host; ``size_op(process_set_id=0, name=None)`` and
   ``process_set_included_op(process_set_id=0, name=None)`` (mpi_ops.py): a set's size / 1 or
   0 for membership, 1 for the global set, -3 (``HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET``) for
   an unknown or removed id; eagerly, in tf.function and in a TF1 graph;
2. ``broadcast_object_fn(root_rank=0, session=None, name=None, process_set=...)``
   (horovod/tensorflow/functions.py): a function returning the root's object, reusable;
3. Keras ``allreduce(value, name=None, average=None, prescale_factor=1.0,
   postscale_factor=1.0, op=None, compression=...)`` and ``reducescatter(value, name=None,
   op=Average)``, ``allgather(value, name=None)``, ``broadcast(value, root_rank, name=None)``
   (horovod/tensorflow/keras/__init__.py): positional arguments mean what they mean there, and
   ``name`` names only the value (horovod/_keras: ``tf.constant(value, name=name)``), so names
   that differ between ranks still pair; ``load_model`` / ``PartialDistributedOptimizer``
   (horovod/keras/__init__.py) parameter orders;
4. Keras ``DistributedOptimizer(op=...)``: anything but Average / Sum (Adasum included) is a
   ValueError when it is made ("op currently only supports Average and Sum");
5. ``BroadcastGlobalVariablesCallback(root_rank, local_variables=...)``: non-variables are a
   ValueError (horovod/tensorflow/keras/callbacks.py);
6. ``BestModelCheckpoint(monitor='val_loss', verbose=0, save_weights_only=False, mode='auto',
   save_freq='epoch')`` (horovod/tensorflow/keras/callbacks.py), the path by keyword or set
   on the attribute before fit (rank 0 writes it).
Prints ``CHECK <name> ok`` (rank 0) and ``TF-API-PARITY-OK rank=R checks=C`` on every rank.
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdcore.tensorflow as hvd  # noqa: E402
import hvdcore.tensorflow.keras as khvd  # noqa: E402

tf.get_logger().setLevel("ERROR")
hvd.init()
R, N = hvd.rank(), hvd.size()
CHECKS = 0
UNKNOWN_SET = -3


def check(name: str, ok: bool, detail: object = "") -> None:
    global CHECKS
    if not ok:
        raise AssertionError(f"rank {R}: check {name} failed {detail}")
    CHECKS += 1
    if R == 0:
        print(f"CHECK {name} ok", flush=True)


def raises(name: str, exc_type: type[BaseException], fn, *words: str) -> None:
    try:
        fn()
    except exc_type as exc:
        check(name, all(w in str(exc) for w in words), exc)
    else:
        raise AssertionError(f"rank {R}: {name}: no {exc_type.__name__}")


def three_ways(name: str, make, want: int) -> None:
    """``make()`` (an int32 scalar op) eagerly, in tf.function and in a TF1 graph."""
    check(f"{name}.eager", int(make()) == want, int(make()))
    check(f"{name}.function", int(tf.function(make)()) == want)
    with tf.Graph().as_default() as graph:
        op = make()
        with tf.compat.v1.Session(graph=graph) as sess:
            got = sess.run(op)
    check(f"{name}.v1graph", int(got) == want, got)


def params(fn) -> list[str]:
    names = list(inspect.signature(fn).parameters)
    return names[1:] if names and names[0] == "self" else names


# 1. is_homogeneous, size_op and process_set_included_op
check("is_homogeneous", hvd.is_homogeneous() is True and khvd.is_homogeneous() is True)
check("size_op.order", params(hvd.size_op)[:2] == ["process_set_id", "name"])
check("process_set_included_op.order",
      params(hvd.process_set_included_op) == ["process_set_id", "name"])
three_ways("size_op.global", lambda: hvd.size_op(), N)
three_ways("included.global", lambda: hvd.process_set_included_op(), 1)
three_ways("included.unknown", lambda: hvd.process_set_included_op(9999), UNKNOWN_SET)
three_ways("size_op.unknown", lambda: hvd.size_op(9999), UNKNOWN_SET)
if N > 1:
    first = hvd.add_process_set([0])
    three_ways("included.member", lambda: hvd.process_set_included_op(first.process_set_id),
               int(R == 0))
    three_ways("size_op.set", lambda: hvd.size_op(first.process_set_id), 1)
    gone = first.process_set_id
    hvd.remove_process_set(first)
    check("included.removed", int(hvd.process_set_included_op(gone)) == UNKNOWN_SET)

# 2. broadcast_object_fn
check("broadcast_object_fn.order", params(hvd.broadcast_object_fn)
      == ["root_rank", "session", "name", "process_set"])
root = N - 1
bcast = hvd.broadcast_object_fn(root_rank=root)
for i in range(2):  # the same function again: Horovod's is built once and called per object
    got = bcast({"from": R, "data": np.arange(R + i)})
    check(f"broadcast_object_fn.call{i}",
          got["from"] == root and np.array_equal(got["data"], np.arange(root + i)), got)
with tf.Graph().as_default():
    got = hvd.broadcast_object_fn(0, None, "graph")(("rank", R))
check("broadcast_object_fn.v1graph", got == ("rank", 0), got)

# 3. the Keras collectives: positional arguments in Horovod's order
x = np.arange(4 * N, dtype=np.float64) + 1.0  # the same on every rank
check("keras.allreduce.order", params(khvd.allreduce)[:7] == [
    "value", "name", "average", "prescale_factor", "postscale_factor", "op", "compression"])
check("keras.allreduce.name_average",
      np.array_equal(khvd.allreduce(x, "k.sum", False).numpy(), x * N))
check("keras.allreduce.prescale",
      np.array_equal(khvd.allreduce(x, "k.pre", None, 2.0).numpy(), x * 2.0))
check("keras.allreduce.op", np.array_equal(khvd.allreduce(x, "k.op", None, 1.0, 1.0,
                                                          hvd.Sum).numpy(), x * N))
check("keras.reducescatter.order", params(khvd.reducescatter)[:3] == ["value", "name", "op"])
part = khvd.reducescatter(x, "k.rs", hvd.Sum).numpy()
check("keras.reducescatter.sum", np.array_equal(part, (x * N)[4 * R:4 * R + 4]), part)
check("keras.allgather.order", params(khvd.allgather)[:2] == ["value", "name"])
check("keras.allgather", np.array_equal(khvd.allgather(x[:1] * R, "k.ag").numpy(),
                                        np.arange(N, dtype=np.float64)))
check("keras.broadcast.order", params(khvd.broadcast)[:3] == ["value", "root_rank", "name"])
check("keras.broadcast", np.array_equal(khvd.broadcast(x * R, root, "k.bc").numpy(), x * root))
# as in Horovod the name labels the value only: names that differ between ranks pair up
mine = f"rank{R}"
check("keras.name_per_rank", np.array_equal(khvd.allreduce(x, mine).numpy(), x)
      and np.array_equal(khvd.broadcast(x * R, 0, mine).numpy(), x * 0)
      and khvd.allgather(x, mine).shape[0] == x.shape[0] * N
      and khvd.reducescatter(x, mine).shape[0] == 4)
check("keras.load_model.order", params(khvd.load_model)[:5] == [
    "filepath", "custom_optimizers", "custom_objects", "compression", "legacy_opts"])
check("keras.partial.order", params(khvd.PartialDistributedOptimizer)[:12] == [
    "optimizer", "name", "device_dense", "device_sparse", "compression", "sparse_as_dense",
    "gradient_predivide_factor", "op", "groups", "process_set", "local_layers",
    "scale_local_gradients"])

# 4. DistributedOptimizer: Average or Sum only, refused when it is made
for bad in (hvd.Adasum, hvd.Min, hvd.Max, hvd.Product):
    for where, make in (("keras", khvd.DistributedOptimizer),
                        ("keras_partial", khvd.PartialDistributedOptimizer),
                        ("tensorflow", hvd.DistributedOptimizer)):
        raises(f"optimizer.op.{bad.name}.{where}", ValueError,
               lambda: make(keras.optimizers.SGD(0.1), op=bad), "Average or Sum")
raises("optimizer.adasum.says_unsupported", ValueError,
       lambda: khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum),
       "Adasum", "not support")
for good in (hvd.Average, hvd.Sum):
    check(f"optimizer.op.{good.name}",
          khvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=good) is not None)

# 5. BroadcastGlobalVariablesCallback: local_variables must be variables
Broadcast = khvd.callbacks.BroadcastGlobalVariablesCallback
for what, value in (("ndarray", [np.zeros(2)]), ("ndarray.alone", np.zeros(2)),
                    ("tensor", [tf.zeros(2)]), ("mixed", [tf.Variable(1.0), 3.0])):
    raises(f"local_variables.{what}", ValueError,
           lambda: Broadcast(0, local_variables=value), "local_variables")
layer = keras.layers.Dense(2)
layer.build((None, 3))
for what, value in (("tf.Variable", tf.Variable(1.0)), ("list", [tf.Variable(1.0)]),
                    ("keras.Variable", layer.kernel), ("none", None)):
    check(f"local_variables.{what}", Broadcast(0, "", value).root_rank == 0)

# 6. BestModelCheckpoint in Horovod's order, path by keyword or attribute
Best = khvd.callbacks.BestModelCheckpoint
check("best.order", params(Best.__init__)[:6] == [
    "monitor", "verbose", "save_weights_only", "mode", "save_freq", "filepath"])
cb = Best("val_acc", 1, False, "max", "epoch")
# Keras 3 keeps ``mode``; tf-keras turns it into ``monitor_op`` at once
mode = cb.mode if hasattr(cb, "mode") else {np.greater: "max"}.get(cb.monitor_op)
check("best.positional", (cb.monitor, cb.verbose, cb.save_weights_only, mode, cb.save_freq,
                          cb.filepath) == ("val_acc", 1, False, "max", "epoch", None))
check("best.weights_only", Best("loss", 0, True).save_weights_only is True)
raises("best.path_first", ValueError, lambda: Best("best.keras"), "filepath=")
raises("best.mode_third", ValueError, lambda: Best("loss", 0, "max"), "mode=")
work = tempfile.mkdtemp(prefix=f"api-parity-{R}-")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer=khvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
data = (np.ones((4, 3), np.float32), np.ones((4, 1), np.float32))
unset = Best(monitor="loss")
raises("best.no_path", ValueError, lambda: model.fit(*data, epochs=1, verbose=0,
                                                     callbacks=[unset]), "filepath")
unset.filepath = os.path.join(work, "set-later.keras")
model.fit(*data, epochs=1, verbose=0, callbacks=[unset])
check("best.path_set_later", os.path.exists(unset.filepath) == (R == 0))
keyword = Best(monitor="loss", filepath=os.path.join(work, "keyword.keras"))
model.fit(*data, epochs=1, verbose=0, callbacks=[keyword])
check("best.path_keyword", os.path.exists(keyword.filepath) == (R == 0))

hvd.barrier()
hvd.shutdown()
print(f"TF-API-PARITY-OK rank={R} checks={CHECKS}", flush=True)
sys.exit(0)
