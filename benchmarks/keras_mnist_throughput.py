"""Keras MNIST training throughput: hvdcore at 1 and 2 ranks vs TensorFlow's
MultiWorkerMirroredStrategy (CPU ring collectives) at 1 and 2 workers, in one run on localhost.

The model is the CNN of ``examples/keras_mnist.py``; each worker trains with the same per-worker
batch (weak scaling, as Horovod's benchmarks do) on real MNIST images, compiled ``model.fit``.
Images/s counts all workers' images; scaling efficiency = images/s at 2 / (2 x images/s at 1)
of the same implementation. Both run on tf-keras by default (``--keras tf_keras``, i.e.
``TF_USE_LEGACY_KERAS=1``): Keras 3.15's ``fit`` under MultiWorkerMirroredStrategy fails here
converting ``PerReplica`` inputs to tensors, so a same-Keras comparison needs tf-keras;
``--keras keras3`` measures hvdcore with Keras 3 and skips the strategy rows. Timed steps are split into windows and the median window is
reported (this machine is shared and noisy). Every worker gets ``cores // workers`` TensorFlow
intra-op threads so no configuration oversubscribes the cores more than another.

Run::

    python benchmarks/keras_mnist_throughput.py [--batch-size 64] [--steps 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from hvdcore.ports import handoff_ports

ROOT = Path(__file__).resolve().parent.parent
RESULT = "RESULT "


def _example():
    spec = importlib.util.spec_from_file_location("keras_mnist", ROOT / "examples" / "keras_mnist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _threads(workers: int) -> None:
    import tensorflow as tf

    n = max(1, (os.cpu_count() or 1) // workers)
    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(2)


class _Timer:
    """Keras callback factory: wall time at the end of every batch."""

    @staticmethod
    def make(keras):
        class Timer(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.stamps = []

            def on_train_batch_end(self, batch, logs=None):
                self.stamps.append(time.perf_counter())

        return Timer()


def _throughput(stamps: list[float], warmup: int, windows: int, global_batch: int) -> dict:
    timed = stamps[warmup - 1:]
    steps = (len(timed) - 1) // windows
    rates = []
    for w in range(windows):
        t0, t1 = timed[w * steps], timed[(w + 1) * steps]
        rates.append(global_batch * steps / (t1 - t0))
    return {"images_per_s": statistics.median(rates), "windows": rates}


def worker_hvd(args: argparse.Namespace) -> None:
    import numpy as np
    import tensorflow as tf

    import hvdcore.tensorflow.keras as hvd

    hvd.init()
    _threads(hvd.local_size())
    ex = _example()
    x, y, _, _ = ex.load_data(args.data, None)
    n_img = args.batch_size * (args.warmup + args.steps)
    x, y = x[hvd.rank()::hvd.size()][:n_img], y[hvd.rank()::hvd.size()][:n_img]
    keras = tf.keras
    keras.utils.set_random_seed(0)
    model = ex.build_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adadelta(1.0 * hvd.size()))
    model.compile(loss="sparse_categorical_crossentropy", optimizer=opt, jit_compile=False)
    timer = _Timer.make(keras)
    model.fit(x, y, batch_size=args.batch_size, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), timer])
    stamps = hvd.allgather_object(timer.stamps)
    if hvd.rank() == 0:
        # the slowest rank defines the step time
        merged = list(np.max(np.array(stamps), axis=0))
        res = _throughput(merged, args.warmup, args.windows, args.batch_size * hvd.size())
        print(RESULT + json.dumps({"impl": "hvdcore", "workers": hvd.size(), **res}), flush=True)


def worker_mwms(args: argparse.Namespace) -> None:
    import tensorflow as tf

    workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    _threads(workers)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    ex = _example()
    x, y, _, _ = ex.load_data(args.data, None)
    n_img = args.batch_size * (args.warmup + args.steps) * workers
    x, y = x[:n_img], y[:n_img]
    data_options = tf.data.Options()
    data_options.experimental_distribute.auto_shard_policy = \
        tf.data.experimental.AutoShardPolicy.DATA
    # global batch; tf.distribute gives each worker batch_size of it
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(
        args.batch_size * workers).with_options(data_options)
    keras = tf.keras
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = ex.build_model()
        model.compile(loss="sparse_categorical_crossentropy",
                      optimizer=keras.optimizers.Adadelta(1.0 * workers), jit_compile=False)
    timer = _Timer.make(keras)
    model.fit(dataset, epochs=1, verbose=0, callbacks=[timer])
    if task == 0:
        res = _throughput(timer.stamps, args.warmup, args.windows, args.batch_size * workers)
        print(RESULT + json.dumps({"impl": "MultiWorkerMirroredStrategy", "workers": workers,
                                   **res}), flush=True)


def _worker_args(args: argparse.Namespace) -> list[str]:
    out = ["--batch-size", str(args.batch_size), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--windows", str(args.windows)]
    if args.data:
        out += ["--data", args.data]
    return out


def _env(keras: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    if keras == "tf_keras":
        env["TF_USE_LEGACY_KERAS"] = "1"
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONUNBUFFERED="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return env


def _parse(out: str) -> dict:
    for line in out.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    raise RuntimeError(f"no result in worker output:\n{out[-4000:]}")


def run_hvd(n: int, args: argparse.Namespace) -> dict:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("mpirun not found: install openmpi-bin")
    cmd = [mpirun, "-np", str(n), "--oversubscribe", "--bind-to", "none", sys.executable,
           __file__, "--worker", "hvd", *_worker_args(args)]
    proc = subprocess.run(cmd, env=_env(args.keras), capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"hvdcore np={n} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return _parse(proc.stdout)


def run_mwms(n: int, args: argparse.Namespace) -> dict:
    ports = handoff_ports(n)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    procs = []
    for i in range(n):
        env = _env(args.keras)
        env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", "mwms",
                                       *_worker_args(args)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=args.timeout)
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for rc, out, err in outs:
        if rc != 0:
            raise RuntimeError(f"MWMS n={n} failed:\n{out[-3000:]}\n{err[-3000:]}")
    return _parse(outs[0][1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=("hvd", "mwms"), help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=64, help="per-worker batch")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=5, help="untimed first steps")
    parser.add_argument("--windows", type=int, default=3, help="timing windows (median)")
    parser.add_argument("--data", default=None, help="MNIST path (see hvdcore.datasets.mnist)")
    parser.add_argument("--keras", choices=("tf_keras", "keras3"), default="tf_keras",
                        help="Keras used by every worker (default tf_keras, see above)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    if args.worker == "hvd":
        return worker_hvd(args)
    if args.worker == "mwms":
        return worker_mwms(args)

    started = time.time()
    impls = ["hvdcore"] + (["MultiWorkerMirroredStrategy"] if args.keras == "tf_keras" else [])
    results = {("hvdcore", 1): run_hvd(1, args), ("hvdcore", 2): run_hvd(2, args)}
    if "MultiWorkerMirroredStrategy" in impls:
        results[("MultiWorkerMirroredStrategy", 1)] = run_mwms(1, args)
        results[("MultiWorkerMirroredStrategy", 2)] = run_mwms(2, args)
    print(f"Keras MNIST CNN ({args.keras}), per-worker batch {args.batch_size}, {args.steps} "
          f"timed steps (median of {args.windows} windows), {os.cpu_count()} CPU cores, "
          "localhost")
    print("| implementation | workers | images/s | scaling efficiency |")
    print("|---|---|---|---|")
    for impl in impls:
        one = results[(impl, 1)]["images_per_s"]
        for n in (1, 2):
            rate = results[(impl, n)]["images_per_s"]
            print(f"| {impl} | {n} | {rate:.1f} | {rate / (n * one):.2f} |")
    if len(impls) == 2:
        ratio = (results[("hvdcore", 2)]["images_per_s"]
                 / results[("MultiWorkerMirroredStrategy", 2)]["images_per_s"])
        print(f"hvdcore / MultiWorkerMirroredStrategy at 2 workers: {ratio:.2f}x")
    print(f"(run took {time.time() - started:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(
            [{"impl": k[0], "workers": k[1], **v} for k, v in results.items()], indent=2))


if __name__ == "__main__":
    main()
