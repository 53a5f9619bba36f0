"""The data-plane check (checks/hvdcore_planes.py) through ReFrame on the local config: five
collectives of torch tensors on the Gloo plane and the host plane against raw torch.distributed
and raw mpi4py, every size correct, the per-size table and plot in run_suite.sh's summary; and
``FAULTS_DATA_PATH=repeat=4,op=alltoall,plane=host`` (every host-plane alltoall made 4 real
alltoalls: ~4x slower at any load) failing ``host_alltoall_ratio`` and nothing else."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from reframe_helpers import ROOT, reframe_env

pytestmark = [pytest.mark.reframe, pytest.mark.mpi, pytest.mark.torch, pytest.mark.slow,
              pytest.mark.quiet]

import planes_report  # noqa: E402

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")
FAULT = "repeat=4,op=alltoall,plane=host"


def run_suite(out: Path, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "checks" / "run_suite.sh"), str(out), "-n",
                           "HvdcoreDataPlanesCheck"],
                          env=reframe_env({"VENV": sys.prefix, **extra_env}),
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def degraded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("planes") / "suite"
    res = run_suite(out, {"FAULTS_DATA_PATH": FAULT})
    data = json.loads((out / "report.json").read_text())
    case = next(tc for run in data["runs"] for tc in run["testcases"])
    return {"out": out, "res": res, "case": case}


@pytest.mark.skipif(
    os.environ.get("HVDCORE_TIMING_VERDICT_TESTS") != "1",
    reason="the host-plane ratios of one run still move with load (6 of 10 runs passed at load "
           "6-18 on 2 cores): a verdict for a quiet node, run with HVDCORE_TIMING_VERDICT_TESTS=1")
def test_one_degraded_collective_fails_its_ratio_and_nothing_else(degraded: dict) -> None:
    res, case = degraded["res"], degraded["case"]
    text = res.stdout + res.stderr
    assert res.returncode == 1, text[-4000:]
    assert case["fail_phase"] == "performance", case["fail_reason"]
    broken = set(re.findall(r"(\w+_ratio)=", case["fail_reason"]))
    assert broken == {"host_alltoall_ratio"}, case["fail_reason"]
    perf = {k.split(":")[-1]: v for k, v in case["perfvalues"].items()}
    assert set(perf) == {f"{p}_{op}_{v}" for p in ("device", "host") for op in OPS
                         for v in ("ratio", "busbw")}
    assert perf["host_alltoall_ratio"][0] < 0.4  # (the floor, min_ratio)


def test_every_size_correct_and_tabled(degraded: dict) -> None:
    rows = planes_report.load_rows(degraded["out"] / "report.json")
    (only,) = rows.values()
    assert len(only) == 2 * 5 * 11  # 2 planes x 5 collectives x 8 B, 32 B, ... 2 MiB, 4 MiB
    assert all(r["wrong"] == 0 for r in only)
    assert {r["raw"] for r in only if r["plane"] == "host"} == {"mpi4py"}
    assert "torch.distributed" in {r["raw"] for r in only if r["plane"] == "device"}
    summary = (degraded["out"] / "summary.md").read_text()
    assert "### device plane (2 ranks" in summary and "### host plane (2 ranks" in summary
    assert "| **ratio at 4 MiB** |" in summary
    png = degraded["out"] / "planes.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_faults_data_path_names_a_collective_and_a_plane() -> None:
    from hvdcore import errors
    from hvdcore.backends import degraded

    fault = degraded.parse("scale=2,op=reducescatter,plane=device")
    assert (fault.op, fault.plane) == ("reducescatter", "device")
    assert fault.slows("reduce_scatter") and not fault.slows("allreduce")
    assert degraded.parse("delay_us=1").slows("alltoallv")  # no op=: every collective
    for bad in ("op=allreduce2", "plane=gpu", "repeat=2,plane=device"):
        with pytest.raises(errors.ConfigError, match="FAULTS_DATA_PATH"):
            degraded.parse(bad)
    host = SimpleNamespace(name="mpi")  # (only its identity matters here)
    assert degraded.wrap_from_env(host, {"FAULTS_DATA_PATH": "delay_us=1,plane=device"}, 0) \
        is host
    assert degraded.wrap_from_env(host, {"FAULTS_DATA_PATH": "delay_us=1,plane=device"}, 0,
                                  "device") is not host
