"""benchmarks/tensorflow_overhead.py in its quick form under real mpirun: the TF calls' results
(eager and in a tf.function, single and grouped) equal the NumPy call's (the script asserts
it) and every row is reported; no figure is judged."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import ROOT, run_mpi

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
