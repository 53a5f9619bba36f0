"""examples/ray_pytorch_mnist_elastic.py on a real local Ray instance: Ray ships the examples
directory to 2 elastic workers, which learn real MNIST; rank 0's figures reach the driver's
callback after each epoch."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
from conftest import ROOT

pytest.importorskip("ray")
pytest.importorskip("torch")
pytestmark = pytest.mark.ray

EXAMPLE = str(ROOT / "examples" / "ray_pytorch_mnist_elastic.py")
SUMMARY = re.compile(r"^hvdcore-ray-mnist-elastic: workers=(\d+) epochs=(\d+) "
                     r"test_accuracy=([0-9.]+) resets=(\d+)$", re.M)


def test_two_ray_workers_learn_mnist_and_report_to_the_driver() -> None:
    cmd = [sys.executable, EXAMPLE, "--num-cpus", "2", "--min-workers", "2", "--max-workers",
           "2", "--", "--epochs", "1", "--train-samples", "6000", "--lr", "0.05"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the example did not finish in 300 s:\n{out[-3000:]}{err[-3000:]}")
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    m = SUMMARY.search(out)
    assert m, out[-3000:]
    # 10 classes: chance is 0.10; one epoch of 6000 images (47 steps of 2 x 64) reaches ~0.85 here
    assert (int(m[1]), int(m[2]), int(m[4])) == (2, 1, 0) and float(m[3]) >= 0.7, out
    assert re.search(r"^driver: epoch 0 done on 2 worker\(s\): test_accuracy=", out, re.M), out
