"""benchmarks/mnist_throughput.py in its quick form, in both modes (all configurations in one
job, and one job per configuration): every configuration runs for real (plain torch, hvdcore
at 1 and 2 ranks, 2 independent processes, a hand-written mpi4py step, DDP) and the JSON has
each one's rate and the efficiencies (no figure is judged: that is the benchmark's business)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, mpi_env

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]


@pytest.mark.parametrize("mode,rounds", [("interleaved", 2), ("launches", 1)])
def test_quick_run_reports_every_configuration(tmp_path: Path, mode: str, rounds: int) -> None:
    out = tmp_path / "mnist.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "mnist_throughput.py"), "--steps", "5",
         "--warmup", "2", "--rounds", str(rounds), "--chunk", "3", "--mode", mode, "--timeout", "240",
         "--json", str(out)],
        env=mpi_env(), capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    doc = json.loads(out.read_text())
    assert set(doc["median"]) == {"torchx1", "hvdcorex1", "solox2", "mpix2", "hvdcorex2",
                                  "ddpx2"}
    assert all(v > 0 for v in doc["median"].values())
    assert all(len(v) == rounds and min(v) > 0 for v in doc["samples"].values())
    assert doc["mode"] == mode
    if mode == "interleaved":  # the independent ranks' paired step times: a share, measured
        assert 0 < doc["lockstep"] <= 1
        assert "lockstep alone" in proc.stdout
    else:
        assert doc["lockstep"] is None
    for key in ("efficiency_hvdcore", "efficiency_ddp", "efficiency_ceiling",
                "hvdcore_vs_ceiling", "efficiency_mpi4py", "hvdcore_vs_mpi4py"):
        assert doc[key] > 0, key
    assert "independent torch (no communication)" in proc.stdout
    assert "hand-written mpi4py step" in proc.stdout
