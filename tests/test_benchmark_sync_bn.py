"""benchmarks/sync_batch_norm.py in its quick form on Keras' torch backend, 2 ranks: every
configuration trains for real and is reported; the synchronized models (hvdcore's layer and
the raw mpi4py floor) end identical on every rank (weights and moving statistics) and the locally normalized one does not (its moving
statistics are each rank's own), which shows the identity check compares. No rate is judged."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, mpi_env

pytestmark = [pytest.mark.torch, pytest.mark.mpi]
if importlib.util.find_spec("keras") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("needs Keras 3 and torch", allow_module_level=True)


def test_quick_run_reports_every_configuration(tmp_path: Path) -> None:
    out = tmp_path / "sync_bn.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sync_batch_norm.py"), "--backend", "torch",
         "--rounds", "2", "--chunk", "2", "--warmup", "1", "--batch-size", "8",
         "--timeout", "400", "--json", str(out)],
        env=mpi_env(), capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    doc = json.loads(out.read_text())
    assert doc["ranks"] == 2 and set(doc["rates"]) == {"sync", "raw_sync", "local", "solo"}
    assert all(len(v) == 2 and min(v) > 0 for v in doc["rates"].values())
    assert set(doc["median_ratios"]) == {"sync/raw_sync", "sync/local", "local/solo", "sync/solo"}
    assert doc["identical"] == {"sync": True, "raw_sync": True, "local": False,
                               "solo": False}
    assert "| sync / local |" in proc.stdout
