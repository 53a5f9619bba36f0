#!/usr/bin/env python3
"""Run Horovod 0.28.1's own examples on hvdcore, with only the import lines changed.

A site's repeat of the drop-in audit: each example is copied into a scratch folder, its
``import horovod...`` lines become ``import hvdcore...``, and it is launched with short settings
(``hvdcorerun -np 2`` for most, ``mpirun`` and ``hvdcorerun --gloo`` for a few). A table of
PASS / FAIL / SKIP per example, with the seconds each took, ends the output; the exit code is 1
when any example failed. Not part of the test suite (it trains for minutes).

Where the examples come from: Horovod's PyPI sdist (downloaded with ``pip download
horovod==0.28.1 --no-deps --no-binary :all:`` into a temp folder) holds the package source but,
as released, no ``examples/`` folder; pass ``--examples DIR``, the ``examples`` folder of a
checkout of the horovod/horovod repository at tag ``v0.28.1``, when it is missing.

Changes made beyond the import lines, all printed before the runs: the Keras MNIST download
(``tf.keras.datasets.mnist.load_data``, which cannot work offline) reads
:func:`hvdcore.datasets.mnist.load` instead; examples without a length flag train for fewer
steps (``STEP_EDITS``). torchvision's MNIST examples get the raw IDX files written under their
data folder from the same data. Examples needing torchvision or TensorFlow are skipped, with
the reason, where that framework does not import.

    python scripts/horovod_examples.py [--examples DIR] [--only SUBSTRING] [--timeout S]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

VERSION = "0.28.1"
IMPORTS = [  # Horovod's import line -> hvdcore's (the migration guide's table)
    (r"^(\s*)import horovod\.(torch|tensorflow\.keras|tensorflow|keras) as hvd\b",
     r"\1import hvdcore.\2 as hvd"),
    (r"^(\s*)import horovod\s*$", r"\1import hvdcore as horovod"),
]
KERAS_MNIST = re.compile(r"tf\.keras\.datasets\.mnist\.load_data\((?:[^()]|\([^()]*\))*\)")
OFFLINE_MNIST = ("(lambda d: ((d[0], d[1]), (d[2], d[3])))"
                 "(__import__('hvdcore.datasets.mnist', fromlist=['load']).load())")
# examples with no flag for their length: (file, text, replacement)
STEP_EDITS = [
    ("tensorflow2/tensorflow2_keras_mnist.py", "steps_per_epoch=500 //", "steps_per_epoch=40 //"),
    ("tensorflow2/tensorflow2_keras_mnist.py", "epochs=24,", "epochs=4,"),
    ("tensorflow2/tensorflow2_mnist.py", "take(10000 //", "take(100 //"),
    ("elastic/tensorflow2/tensorflow2_mnist_elastic.py", "take(10000 //", "take(100 //"),
    ("elastic/tensorflow2/tensorflow2_keras_mnist_elastic.py", "steps_per_epoch=500 //",
     "steps_per_epoch=40 //"),
    ("elastic/tensorflow2/tensorflow2_keras_mnist_elastic.py", "epochs=24-state.epoch",
     "epochs=3-state.epoch"),
]
BENCH = ("--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "2",
         "--batch-size", "4")
KBENCH = ("--num-batches-per-iter", "2", "--num-iters", "2", "--batch-size", "4")
MNIST1 = ("--epochs", "1", "--log-interval", "200")
DIRS = ("--train-dir", "imagenet/train", "--val-dir", "imagenet/val")
SMALL = ("--batch-size", "2", "--val-batch-size", "2", "--batches-per-allreduce", "2")
TV = ("torch", "torchvision")
TF = ("tensorflow",)
IMAGENET_NEEDS = (*TV, "tqdm", "tensorboard")


@dataclass(frozen=True)
class Example:
    """One run: the example's path under ``examples/``, how it is launched, its arguments."""

    path: str
    # "hvdcorerun", "mpirun", "gloo" (hvdcorerun --gloo), "elastic" (hvdcorerun --min-np 1
    # --max-np N), "num-proc" (the example starts its ranks itself with horovod.run)
    launch: str
    args: tuple[str, ...] = ()
    needs: tuple[str, ...] = ("torch",)  # modules that must import
    np: int = 2


EXAMPLES = [
    Example("pytorch/pytorch_allreduce.py", "hvdcorerun"),
    Example("pytorch/pytorch_allreduce.py", "mpirun"),
    Example("pytorch/pytorch_allreduce.py", "gloo", np=3),
    Example("pytorch/pytorch_mnist.py", "hvdcorerun", MNIST1, TV),
    Example("pytorch/pytorch_mnist.py", "num-proc", (*MNIST1, "--num-proc", "2"), TV),
    Example("pytorch/pytorch_imagenet_resnet50.py", "hvdcorerun",
            (*DIRS, "--epochs", "1", *SMALL), IMAGENET_NEEDS),
    Example("pytorch/pytorch_imagenet_resnet50.py", "hvdcorerun",  # resumes from epoch 1
            (*DIRS, "--epochs", "2", "--fp16-allreduce", *SMALL), IMAGENET_NEEDS),
    Example("pytorch/pytorch_synthetic_benchmark.py", "hvdcorerun",
            ("--model", "resnet18", *BENCH), TV),
    Example("pytorch/pytorch_synthetic_benchmark.py", "gloo",
            ("--model", "resnet18", "--fp16-allreduce", *BENCH), TV, np=3),
    Example("elastic/pytorch/pytorch_mnist_elastic.py", "hvdcorerun", MNIST1, TV),
    Example("elastic/pytorch/pytorch_mnist_elastic.py", "elastic", MNIST1, TV),
    Example("elastic/pytorch/pytorch_synthetic_benchmark_elastic.py", "hvdcorerun",
            ("--model", "resnet18", *BENCH), TV),
    Example("tensorflow2/tensorflow2_mnist.py", "hvdcorerun", needs=TF),
    Example("tensorflow2/tensorflow2_mnist.py", "mpirun", needs=TF),
    Example("tensorflow2/tensorflow2_mnist.py", "num-proc", ("2", "localhost:2", "mpi"), TF),
    Example("tensorflow2/tensorflow2_keras_mnist.py", "hvdcorerun", needs=TF),
    Example("tensorflow2/tensorflow2_synthetic_benchmark.py", "hvdcorerun",
            ("--model", "MobileNetV2", "--no-cuda", *BENCH), TF),
    Example("tensorflow2/tensorflow2_keras_synthetic_benchmark.py", "gloo",
            ("--model", "MobileNetV2", "--no-cuda", *KBENCH), TF),
    Example("elastic/tensorflow2/tensorflow2_mnist_elastic.py", "hvdcorerun", needs=TF),
    Example("elastic/tensorflow2/tensorflow2_keras_mnist_elastic.py", "elastic", needs=TF),
]


def fetch_sdist(dest: Path) -> Path:
    """Download and unpack Horovod's sdist into ``dest``; return the unpacked folder."""
    subprocess.run([sys.executable, "-m", "pip", "download", f"horovod=={VERSION}",
                    "--no-deps", "--no-binary", ":all:", "-q", "-d", str(dest)], check=True)
    archive = dest / f"horovod-{VERSION}.tar.gz"
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    return dest / f"horovod-{VERSION}"


def prepare(examples: Path, work: Path) -> list[str]:
    """Copy ``examples`` to ``work`` and edit the copies; return the edits made, one a line."""
    shutil.copytree(examples, work)
    edits = []
    for path in sorted(work.rglob("*.py")):
        text = path.read_text()
        new = text
        for pattern, repl in IMPORTS:
            new = re.sub(pattern, repl, new, flags=re.MULTILINE)
        if new != text:
            edits.append(f"{path.relative_to(work)}: import lines")
        if KERAS_MNIST.search(new):
            new = KERAS_MNIST.sub(OFFLINE_MNIST, new)
            edits.append(f"{path.relative_to(work)}: Keras MNIST download -> "
                         "hvdcore.datasets.mnist.load()")
        path.write_text(new)
    for rel, old, repl in STEP_EDITS:
        path = work / rel
        if path.exists() and old in path.read_text():
            path.write_text(path.read_text().replace(old, repl))
            edits.append(f"{rel}: {old!r} -> {repl!r}")
    return edits


def write_torchvision_mnist(folder: Path) -> None:
    """Write the four raw IDX files torchvision's MNIST reads, from hvdcore's offline MNIST."""
    import numpy as np

    from hvdcore.datasets import mnist

    x_train, y_train, x_test, y_test = mnist.load()
    raw = folder / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name, arr in (("train-images-idx3-ubyte", x_train), ("t10k-images-idx3-ubyte", x_test)):
        header = np.array([2051, len(arr), 28, 28], ">u4").tobytes()
        (raw / name).write_bytes(header + arr.astype(np.uint8).tobytes())
    for name, arr in (("train-labels-idx1-ubyte", y_train), ("t10k-labels-idx1-ubyte", y_test)):
        header = np.array([2049, len(arr)], ">u4").tobytes()
        (raw / name).write_bytes(header + arr.astype(np.uint8).tobytes())


def write_image_folders(folder: Path) -> None:
    """A tiny ImageFolder tree (2 classes, 4 random 40x40 PNGs each) for train/ and val/."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for label in ("n01", "n02"):
            (folder / split / label).mkdir(parents=True, exist_ok=True)
            for i in range(4):
                pixels = rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / split / label / f"{i}.png")


def importable(module: str) -> str | None:
    """None when ``module`` imports in a fresh interpreter, else the last line of the error."""
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                          text=True, timeout=300)
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}"


def command(example: Example, script: Path) -> list[str]:
    """The launch command of ``example``."""
    python = [sys.executable, str(script), *example.args]
    run = [sys.executable, "-m", "hvdcore.runner"]
    if example.launch == "hvdcorerun":
        return [*run, "-np", str(example.np), *python]
    if example.launch == "gloo":
        return [*run, "--gloo", "-np", str(example.np), *python]
    if example.launch == "elastic":
        return [*run, "-np", str(example.np), "--min-np", "1", "--max-np", str(example.np),
                *python]
    if example.launch == "mpirun":
        return ["mpirun", "-np", str(example.np), *python]
    return python  # num-proc: the example launches its ranks itself


def run_one(example: Example, work: Path, timeout: float, log: Path) -> tuple[str, float]:
    """Run ``example``; return its verdict and seconds. Output goes to ``log``."""
    script = work / example.path
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", TF_CPP_MIN_LOG_LEVEL="1")
    if "tensorflow" in example.needs:
        # Horovod 0.28.1 drives Keras 2 only: its TF2 examples call Keras 2 APIs
        # (`opt.variables()`, `compile(experimental_run_tf_function=...)`) that Keras 3 lacks
        env.setdefault("TF_USE_LEGACY_KERAS", "1")
    start = time.monotonic()
    # its own process group, so that a timeout stops the launcher and every rank it started
    proc = subprocess.Popen(command(example, script), cwd=script.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        verdict = "PASS" if proc.returncode == 0 else f"FAIL (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            output, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        verdict = f"FAIL (timeout {timeout:.0f} s)"
    log.write_bytes(output)
    return verdict, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    """Prepare the examples, run them one at a time, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=Path,
                        help="Horovod 0.28.1's examples/ folder (the sdist has none)")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temp folder)")
    parser.add_argument("--only", default="", help="run the examples whose path has this")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per example")
    args = parser.parse_args(argv)
    base = args.work or Path(tempfile.mkdtemp(prefix="hvdex-"))
    base.mkdir(parents=True, exist_ok=True)
    examples = args.examples
    if examples is None:
        sdist = fetch_sdist(base / "sdist")
        examples = sdist / "examples"
        if not examples.is_dir():
            print(f"horovod-{VERSION}'s sdist has no examples/ folder: pass --examples DIR "
                  f"(a horovod/horovod checkout at tag v{VERSION})", file=sys.stderr)
            return 2
    work = base / "run"
    if work.exists():
        shutil.rmtree(work)
    for line in prepare(examples, work):
        print(f"edit: {line}")
    missing = {need: importable(need) for need in
               sorted({n for e in EXAMPLES if args.only in e.path for n in e.needs})}
    if missing.get("torchvision", "absent") is None:
        for sub in ("pytorch", "elastic/pytorch"):
            for folder in ("data", "data-0", "data-1", "data-2"):
                write_torchvision_mnist(work / sub / folder)
        write_image_folders(work / "pytorch" / "imagenet")
    rows = []
    for number, example in enumerate(EXAMPLES):
        if args.only not in example.path:
            continue
        name = f"{example.path} [{example.launch} np={example.np}]"
        absent = [f"{n}: {missing[n]}" for n in example.needs if missing[n] is not None]
        if absent:
            rows.append((name, f"SKIP ({'; '.join(absent)})", 0.0))
            continue
        log = base / f"{number:02d}-{Path(example.path).stem}-{example.launch}.log"
        verdict, seconds = run_one(example, work, args.timeout, log)
        rows.append((name, verdict, seconds))
        print(f"{verdict:<8} {seconds:6.1f} s  {name}  (log: {log})", flush=True)
    width = max((len(r[0]) for r in rows), default=10)
    print(f"\n{'example':<{width}}  {'seconds':>7}  result")
    for name, verdict, seconds in rows:
        print(f"{name:<{width}}  {seconds:7.1f}  {verdict}")
    return 1 if any(r[1].startswith("FAIL") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
