#!/usr/bin/env python3
"""Synthetic ``keras.applications`` training throughput with hvdcore (Horovod's Keras benchmark).

Every rank trains ``keras.applications.<--model>(weights=None)`` (default ``ResNet50``: random
initial weights, nothing downloaded) with ``model.fit`` on one fixed random batch, through
``hvd.DistributedOptimizer``; ``BroadcastGlobalVariablesCallback(0)`` starts every rank from
rank 0's weights. ``--keras keras3`` (default) uses Keras 3 with ``hvdcore.keras``;
``--keras tf-keras`` sets ``TF_USE_LEGACY_KERAS=1`` and uses tf-keras with
``hvdcore.tensorflow.keras`` (the tf-keras package must be installed).

Run::

    hvdcorerun -np 2 python examples/keras_synthetic_benchmark.py             # ResNet50, 224 px
    mpirun -np 2 python examples/keras_synthetic_benchmark.py --model MobileNetV2 \\
        --image-size 32 --batch-size 4 --num-warmup-batches 1 --num-batches-per-iter 2 \\
        --num-iters 3                                                          # seconds

Measurement and output are those of ``examples/pytorch_synthetic_benchmark.py`` (see its
docstring): a warm-up ``fit`` of ``--num-warmup-batches`` steps (graph tracing), then one
``fit`` of ``--num-iters`` epochs of ``--num-batches-per-iter`` steps, each epoch timed from a
barrier; rank 0 prints per-iteration, per-rank and total images/s and the summary line::

    hvdcore-synthetic: framework=tensorflow model=ResNet50 parameters=25636712 ranks=2 device=cpu batch_size=32 image_size=224 timed_steps=100 timed_seconds=... images_per_sec_per_rank=... images_per_sec_per_rank_conf=... total_images_per_sec=... total_images_per_sec_conf=...
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Synthetic keras.applications training benchmark (images/s per rank and in "
                    "total) with hvdcore. Defaults are Horovod's: ResNet50, 224 px, batch 32, "
                    "10 warm-up steps, 10 iterations of 10 steps. For a quick CPU run: "
                    "--model MobileNetV2 --image-size 32 --batch-size 4 --num-warmup-batches 1 "
                    "--num-batches-per-iter 2 --num-iters 3.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="ResNet50",
                   help="a keras.applications constructor, built with weights=None "
                        "(ResNet50, ResNet101, MobileNetV2, EfficientNetB0, ...)")
    p.add_argument("--keras", choices=("keras3", "tf-keras"), default="keras3",
                   help="Keras 3 (hvdcore.keras) or tf-keras (TF_USE_LEGACY_KERAS=1)")
    p.add_argument("--num-classes", type=int, default=1000, help="classifier outputs")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank per step")
    p.add_argument("--image-size", type=int, default=224,
                   help="square image side in pixels (keras.applications want >= 32)")
    p.add_argument("--num-warmup-batches", type=int, default=10,
                   help="steps before timing starts (graph tracing, allocator)")
    p.add_argument("--num-batches-per-iter", type=int, default=10, help="steps per iteration")
    p.add_argument("--num-iters", type=int, default=10, help="timed iterations")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (per rank)")
    p.add_argument("--threads", type=int, default=0,
                   help="TensorFlow intra-op threads per rank (0: cores / ranks on this node); "
                        "give runs you compare the same value")
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="compress gradients to float16 for the allreduce")
    p.add_argument("--seed", type=int, default=42, help="random seed (model and data)")
    args = p.parse_args(argv)
    for name in ("batch_size", "image_size", "num_batches_per_iter", "num_iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.num_warmup_batches < 0:
        p.error("--num-warmup-batches must not be negative")
    return args


def mean_conf(values: Sequence[float]) -> tuple[float, float]:
    """Mean and 95 % confidence half-width (1.96 std; 0 for a single value)."""
    mean = statistics.fmean(values)
    return mean, (1.96 * statistics.stdev(values) if len(values) > 1 else 0.0)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Which Keras TensorFlow exposes is fixed when TensorFlow is first imported.
    os.environ["TF_USE_LEGACY_KERAS"] = "1" if args.keras == "tf-keras" else "0"
    import tensorflow as tf

    if args.keras == "tf-keras":
        import tf_keras as keras

        import hvdcore.tensorflow.keras as hvd
    else:
        import keras

        import hvdcore.keras as hvd

    hvd.init()
    threads = args.threads or max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:  # one GPU per rank on the node
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
    keras.utils.set_random_seed(args.seed)

    build = getattr(keras.applications, args.model, None)
    if not callable(build):
        raise SystemExit(f"keras.applications has no model {args.model!r}")
    model = build(weights=None, input_shape=(args.image_size, args.image_size, 3),
                  classes=args.num_classes)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(args.lr), compression=compression)
    # jit_compile=False: an XLA-compiled step cannot call into MPI.
    model.compile(loss="sparse_categorical_crossentropy", optimizer=opt, jit_compile=False)

    rng = tf.random.Generator.from_seed(args.seed + hvd.rank())
    data = rng.uniform((args.batch_size, args.image_size, args.image_size, 3))
    target = rng.uniform((args.batch_size,), 0, args.num_classes, dtype=tf.int64)
    dataset = tf.data.Dataset.from_tensors((data, target)).repeat()

    rank, size = hvd.rank(), hvd.size()
    device = "gpu" if gpus else "cpu"
    params = int(model.count_params())
    if rank == 0:
        print(f"model {args.model} ({params} parameters, {args.keras}), batch "
              f"{args.batch_size} x {args.image_size} px per rank, {size} rank(s), device "
              f"{device}, {threads} thread(s)/rank", flush=True)

    broadcast = hvd.callbacks.BroadcastGlobalVariablesCallback(0)
    if args.num_warmup_batches:
        model.fit(dataset, steps_per_epoch=args.num_warmup_batches, epochs=1, verbose=0,
                  shuffle=False, callbacks=[broadcast])

    rates: list[float] = []
    seconds: list[float] = []

    class Timer(keras.callbacks.Callback):
        """Times each epoch (one iteration) from a barrier."""

        def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
            hvd.barrier()
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            dt = time.perf_counter() - self.t0
            seconds.append(dt)
            rates.append(args.batch_size * args.num_batches_per_iter / dt)
            if rank == 0:
                print(f"Iter #{epoch}: {rates[-1]:.1f} img/sec on rank 0", flush=True)

    timed = [Timer()] if args.num_warmup_batches else [broadcast, Timer()]
    model.fit(dataset, steps_per_epoch=args.num_batches_per_iter, epochs=args.num_iters,
              verbose=0, shuffle=False, callbacks=timed)

    all_rates: list[list[float]] = hvd.allgather_object(rates)
    all_seconds: list[list[float]] = hvd.allgather_object(seconds)
    if rank == 0:
        totals = [sum(r[i] for r in all_rates) for i in range(args.num_iters)]
        for i, total in enumerate(totals):
            print(f"hvdcore-synthetic-iter: iter={i} images_per_sec_per_rank={total / size:.2f} "
                  f"total_images_per_sec={total:.2f}")
        for r, per_rank in enumerate(all_rates):
            mean, conf = mean_conf(per_rank)
            print(f"hvdcore-synthetic-rank: rank={r} images_per_sec={mean:.2f} conf={conf:.2f}")
        total, total_conf = mean_conf(totals)
        window = sum(max(s[i] for s in all_seconds) for i in range(args.num_iters))
        print(f"Img/sec per rank: {total / size:.1f} +-{total_conf / size:.1f}")
        print(f"Total img/sec on {size} rank(s): {total:.1f} +-{total_conf:.1f}")
        print(f"hvdcore-synthetic: framework=tensorflow model={args.model} parameters={params} "
              f"ranks={size} device={device} batch_size={args.batch_size} "
              f"image_size={args.image_size} "
              f"timed_steps={args.num_iters * args.num_batches_per_iter} "
              f"timed_seconds={window:.3f} images_per_sec_per_rank={total / size:.2f} "
              f"images_per_sec_per_rank_conf={total_conf / size:.2f} "
              f"total_images_per_sec={total:.2f} total_images_per_sec_conf={total_conf:.2f}",
              flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
