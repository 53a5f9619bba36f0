"""examples/spark_pytorch_mnist.py on a real local Spark: 2 ranks, each a Spark task, learn real
MNIST with ``pytorch_mnist.py``'s training; their lines reach the driver tagged by rank."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
from conftest import ROOT

pytest.importorskip("pyspark")
pytest.importorskip("torch")
pytestmark = pytest.mark.spark

EXAMPLE = str(ROOT / "examples" / "spark_pytorch_mnist.py")
RANK0 = re.compile(r"^\[0\]<stdout>:hvdcore-mnist: ranks=(\d+) epochs=(\d+) "
                   r"test_accuracy=([0-9.]+) ", re.M)


def test_two_spark_tasks_learn_mnist() -> None:
    cmd = [sys.executable, EXAMPLE, "--num-proc", "2", "--", "--epochs", "1",
           "--max-steps-per-epoch", "60"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the example did not finish in 300 s:\n{out[-3000:]}{err[-3000:]}")
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    m = RANK0.search(out)
    assert m, out[-3000:]
    # 10 classes: chance is 0.10; 60 steps of 2 x 64 images reach ~0.83 here
    assert (int(m[1]), int(m[2])) == (2, 1) and float(m[3]) >= 0.6, out
    assert out.rstrip().endswith("hvdcore-spark-mnist: ranks=2 exit_codes=[0, 0]"), out[-2000:]
