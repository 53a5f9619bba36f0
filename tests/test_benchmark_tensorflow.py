"""The TensorFlow benchmarks in their quick forms under real mpirun; no figure is judged.
benchmarks/tensorflow_overhead.py: the TF calls' results (eager and in a tf.function, single
and grouped) equal the NumPy call's (the script asserts it) and every row is reported.
benchmarks/tensorflow_v1_training.py: every configuration trains and is reported."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, mpi_env, run_mpi

pytest.importorskip("tensorflow")
pytestmark = [pytest.mark.tensorflow, pytest.mark.mpi]


def test_quick_run_at_two_ranks(tmp_path: Path) -> None:
    out = tmp_path / "tf.json"
    proc = run_mpi(2, [str(ROOT / "benchmarks" / "tensorflow_overhead.py"), "--sizes",
                       "4KiB,64KiB", "--reps", "20", "--json", str(out)], timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    doc = json.loads(out.read_text())
    assert doc["ranks"] == 2
    assert {(r["bytes"], r["peer"]) for r in doc["rows"]} == {
        (b, p) for b in (4096, 65536)
        for p in ("mpi4py", "hvdcore NumPy", "hvdcore TF", "hvdcore TF graph", "NumPy grouped",
                  "TF grouped", "TF graph grouped")}
    assert {r["tensors"] for r in doc["rows"] if r["peer"].endswith("grouped")} == {8}
    assert all(math.isfinite(r["median_us"]) for r in doc["rows"])  # every row was measured


def test_tf1_training_benchmark_quick_run(tmp_path: Path) -> None:
    """benchmarks/tensorflow_v1_training.py, one round: every configuration trains and is
    reported, and the identity check compares: the three that reduce end with the same weights
    on every rank, the one that does not (``solo``, each rank on its own batches) does not."""
    out = tmp_path / "tfv1.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tensorflow_v1_training.py"), "--rounds",
         "1", "--chunk", "4", "--warmup", "1", "--batch-size", "8", "--timeout", "300",
         "--json", str(out)], env=mpi_env(), capture_output=True, text=True, timeout=400,
        cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    doc = json.loads(out.read_text())
    assert doc["ranks"] == 2 and doc["chunk"] == 4
    assert all(len(v) == 1 and v[0] > 0 for v in doc["rates"].values())
    assert doc["identical"] == {"hvdcore": True, "raw": True, "hvdcore_passes4": True,
                               "solo": False}
    assert set(doc["median_ratios"]) == {"hvdcore/raw", "hvdcore/solo", "hvdcore_passes4/solo",
                                         "raw/solo"}
    assert "| hvdcore / raw |" in proc.stdout
