"""hvdcore.keras' clear errors for a wrong or mixed Keras backend (one process, no MPI launch).

``KERAS_BACKEND=B python keras_backend_errors.py``; prints ``KERAS-BACKEND-ERRORS-OK backend=B``.

- torch, jax: ``import hvdcore.keras`` loads no TensorFlow (and on JAX no torch); a tf-keras
  optimizer, a TensorFlow gradient, hvdcore.tensorflow.keras' DistributedOptimizer (the issue's
  crash: TensorFlow tensors handed to a torch optimizer) and a Keras backend switched after
  import are each an UnsupportedError naming the backend, raised before Keras runs anything;
  ``--check-build``'s Keras line names the backend and the backends hvdcore.keras trains on;
  without JAX installed, ``import hvdcore.keras`` on jax is an UnsupportedError naming 'jax'
  and what to install;
- torch, jax: Horovod's Keras rules hold there too: ``DistributedOptimizer(op=Adasum or Min)``
  and ``BroadcastGlobalVariablesCallback(local_variables=[ndarray])`` are ValueErrors,
  ``BestModelCheckpoint`` takes (monitor, verbose, save_weights_only, mode, save_freq) and its
  path by keyword;
- numpy (a Keras backend hvdcore.keras does not train on): ``DistributedOptimizer`` is an
  UnsupportedError naming 'numpy' and the supported backends.
"""

from __future__ import annotations

import importlib.util
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
BACKEND = os.environ["KERAS_BACKEND"]


def check(name: str, ok: bool, detail: object = "") -> None:
    if not ok:
        raise AssertionError(f"check {BACKEND}.{name} failed: {detail}")
    print(f"CHECK {BACKEND}.{name} ok", flush=True)


def raises(call, *needles: str) -> str:
    from hvdcore.errors import UnsupportedError

    try:
        call()
    except UnsupportedError as exc:
        missing = [n for n in needles if n not in str(exc)]
        if missing:
            raise AssertionError(f"error lacks {missing}: {exc}") from exc
        return str(exc)
    raise AssertionError(f"no UnsupportedError (wanted one naming {needles})")


if BACKEND == "jax" and importlib.util.find_spec("jax") is None:
    raises(lambda: __import__("hvdcore.keras"), "Keras could not load its backend 'jax'",
           "pip install jax")
    check("import_without_jax", True)
    print(f"KERAS-BACKEND-ERRORS-OK backend={BACKEND}", flush=True)
    sys.exit(0)
if BACKEND not in ("jax", "torch"):
    import keras

    import hvdcore.keras as hvd

    raises(lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), f"'{BACKEND}'",
           "supported: jax, tensorflow, torch")
    check("distributed_optimizer_unsupported", True)
    print(f"KERAS-BACKEND-ERRORS-OK backend={BACKEND}", flush=True)
    sys.exit(0)

import keras  # noqa: E402
import numpy as np  # noqa: E402

import hvdcore.keras as hvd  # noqa: E402

others = ("tensorflow", "torch") if BACKEND == "jax" else ("tensorflow",)
check("import_without_tensorflow", not [m for m in others if m in sys.modules],
      sorted(m for m in sys.modules if m.split(".")[0] in others)[:3])
hvd.init()
# hvdcorerun --check-build's Keras line: the running backend and what hvdcore.keras trains on
from hvdcore.capabilities import capabilities  # noqa: E402
from hvdcore.runner.check_build import format_report  # noqa: E402

line = next((ln for ln in format_report(capabilities(["keras"])).splitlines() if "Keras" in ln),
            "")
wanted = ", ".join(b for b in ("jax", "tensorflow", "torch") if importlib.util.find_spec(b))
check("check_build.keras_line", line.strip().startswith(f"[X] Keras [hvdcore.keras: {wanted}] ")
      and f"(backend {BACKEND}" in line, line)
# Horovod's Keras rules hold on this backend too: DistributedOptimizer takes Average or Sum,
# local_variables are variables, BestModelCheckpoint takes (monitor, verbose,
# save_weights_only, mode, save_freq) and the path by keyword
for bad in (hvd.Adasum, hvd.Min):
    try:
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=bad)
    except ValueError as exc:
        check(f"optimizer_op_{bad.name.lower()}", "Average or Sum" in str(exc), exc)
    else:
        raise AssertionError(f"DistributedOptimizer(op={bad.name}) was accepted")
try:
    hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[np.zeros(2)])
except ValueError as exc:
    check("local_variables_ndarray", "local_variables" in str(exc), exc)
else:
    raise AssertionError("local_variables=[ndarray] was accepted")
check("local_variables_variable", hvd.callbacks.BroadcastGlobalVariablesCallback(
    0, local_variables=keras.Variable(np.zeros(2))).root_rank == 0)
best = hvd.callbacks.BestModelCheckpoint("val_acc", 1, False, "max")
check("best_checkpoint_order", (best.monitor, best.verbose, best.mode, best.filepath)
      == ("val_acc", 1, "max", None))
try:
    hvd.callbacks.BestModelCheckpoint("best.keras")
except ValueError as exc:
    check("best_checkpoint_path_first", "filepath=" in str(exc), exc)
else:
    raise AssertionError("BestModelCheckpoint('best.keras') was accepted")
for kwargs, needle in (({"fused": True}, "fused=True"), ({"fused": None}, "fused=None"),
                       ({"synchronized": True}, "synchronized=True")):
    try:
        hvd.SyncBatchNormalization(**kwargs)
    except ValueError as exc:
        check(f"sync_batch_norm_refuses_{next(iter(kwargs))}_{kwargs[next(iter(kwargs))]}",
              needle in str(exc), exc)
    else:
        raise AssertionError(f"SyncBatchNormalization({kwargs}) was accepted")
if importlib.util.find_spec("tf_keras") is not None:
    import tf_keras

    raises(lambda: hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.1)), f"'{BACKEND}'",
           "tf_keras")
    check("tf_keras_optimizer", True)
if importlib.util.find_spec("tensorflow") is not None:
    import tensorflow as tf

    import hvdcore.tensorflow.keras as hvd_tf

    raises(lambda: hvd_tf.DistributedOptimizer(keras.optimizers.SGD(0.1)), f"'{BACKEND}'",
           "hvdcore.keras")
    check(f"tensorflow_binding_refuses_{BACKEND}_backend", True)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    var = keras.Variable(np.zeros(3, np.float32))
    raises(lambda: opt.apply([tf.ones(3)], [var]), f"'{BACKEND}'", "tensorflow")
    check("tensorflow_gradient", np.array_equal(keras.ops.convert_to_numpy(var), np.zeros(3)))
    # a backend switched after hvdcore.keras read it
    keras.config.set_backend("tensorflow")
    import keras as switched  # noqa: E402  (set_backend re-imports keras)

    raises(lambda: hvd.DistributedOptimizer(switched.optimizers.SGD(0.1)), "'tensorflow'",
           f"'{BACKEND}'")
    check("backend_switched", True)
hvd.shutdown()
print(f"KERAS-BACKEND-ERRORS-OK backend={BACKEND}", flush=True)
