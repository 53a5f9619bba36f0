"""The local suite end to end (README's first command), the report tool on its real output, and a
broken environment that the capability check must catch with hvdcore's reason."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reframe_helpers import (
    CHECKS,
    CONFIGS,
    MNIST_EXAMPLE,
    ROOT,
    TOOLS,
    reframe_env,
    run_reframe,
)

pytestmark = [pytest.mark.reframe, pytest.mark.mpi, pytest.mark.torch, pytest.mark.slow]

REPORT_TOOL = TOOLS / "report.py"
#: The local venv environment declares tensorflow when it can import it: then the suite also
#: runs the TensorFlow MNIST variant (examples/keras_mnist.py).
HAVE_TF = importlib.util.find_spec("tensorflow") is not None
FRAMEWORKS = ["torch", "tensorflow"] if HAVE_TF else ["torch"]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One real run of the whole local suite: ``reframe -C checks/config/local.py -c checks/ -r``."""
    if not MNIST_EXAMPLE.exists():
        pytest.skip(f"{MNIST_EXAMPLE.relative_to(ROOT)} (the PyTorch example) is not in this checkout")
    work = tmp_path_factory.mktemp("rfm-local")
    report = work / "report.json"
    t0 = time.monotonic()
    res = run_reframe(["-C", str(CONFIGS / "local.py"), "-c", str(CHECKS), "-r",
                       "--report-file", str(report)], work, timeout=900)
    return {"work": work, "report": report, "res": res, "seconds": time.monotonic() - t0}


def test_local_suite_passes(local_run: dict) -> None:
    res = local_run["res"]
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert re.search(r"PASSED.*Ran (\d+)/\1 test case", out), out[-3000:]
    data = json.loads(local_run["report"].read_text())
    cases = {tc["display_name"]: tc for run in data["runs"] for tc in run["testcases"]}
    names = " ".join(cases)
    for check in ("HvdcoreCapabilitiesCheck %framework=torch", "HvdcoreCollectivesCheck",
                  "HvdcoreMnistCheck %scale=1_node %baseline.framework=torch",
                  "MnistBaseline %framework=torch"):
        assert check in names, names
    assert all(tc["result"] == "pass" for tc in cases.values())
    mnist = cases["HvdcoreMnistCheck %scale=1_node %baseline.framework=torch "
                  "%baseline.hvdcore_module=env"]
    assert mnist["num_tasks"] == 2
    # The suite must stay fast enough for the README's first command (< 10 minutes here).
    assert local_run["seconds"] < 600, f"local suite took {local_run['seconds']:.0f}s"


@pytest.mark.tensorflow
def test_tensorflow_mnist_variant_passes(local_run: dict) -> None:
    """The Keras example, run by the same check: sanity (both ranks, accuracy) and efficiency
    against its own 1-rank baseline."""
    if not HAVE_TF:
        pytest.skip("TensorFlow is not installed: the local suite has no tensorflow variant")
    data = json.loads(local_run["report"].read_text())
    cases = {tc["display_name"]: tc for run in data["runs"] for tc in run["testcases"]}
    check = cases["HvdcoreMnistCheck %scale=1_node %baseline.framework=tensorflow "
                  "%baseline.hvdcore_module=env"]
    base = cases["MnistBaseline %framework=tensorflow %hvdcore_module=env "
                 "~local:default+hvdcore-venv"]
    assert check["result"] == base["result"] == "pass"
    assert (check["num_tasks"], base["num_tasks"]) == (2, 1)
    perf = {k.split(":")[-1]: v[0] for k, v in check["perfvalues"].items()}
    base_ips = next(v[0] for k, v in base["perfvalues"].items() if k.endswith(":images_per_sec"))
    assert perf["efficiency"] == pytest.approx(100 * perf["images_per_sec_per_rank"] / base_ips)
    assert any("keras_mnist.py" in opt for opt in check["executable_opts"])
    text = (Path(check["outputdir"]) / check["job_stdout"]).read_text()
    match = re.search(r"hvdcore-mnist: ranks=2 epochs=1 test_accuracy=([0-9.]+) ", text)
    assert match and float(match[1]) > 0.5, text[-2000:]


def test_report_tool_summary_and_plot(local_run: dict, tmp_path: Path) -> None:
    md, png = tmp_path / "summary.md", tmp_path / "scaling.png"
    res = subprocess.run([sys.executable, str(REPORT_TOOL), "--report", str(local_run["report"]),
                          "-o", str(md), "--plot", str(png)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    text = md.read_text()
    assert "**PASSED**" in text
    for word in ("HvdcoreCollectivesCheck", "busbw", "latency", "images_per_sec",
                 "efficiency", "## MNIST scaling", "local:default"):
        assert word in text, text
    # The scaling table has the 1-rank baseline (100%) and the 2-rank point, per framework.
    for framework in FRAMEWORKS:
        rows = re.findall(rf"\| local:default\+hvdcore-venv {framework} \| (\d+) \| ([\d.]+) \|"
                          r" [\d.]+ \| ([\d.]+)%", text)
        assert [int(r[0]) for r in rows] == [1, 2], text
        assert float(rows[0][2]) == 100.0 and float(rows[1][2]) > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000

    # The perflogs give the same cases (what a nightly job keeps between runs).
    res2 = subprocess.run([sys.executable, str(REPORT_TOOL), "--perflogs",
                           str(local_run["work"] / "rfm" / "perflogs")],
                          capture_output=True, text=True, timeout=120)
    assert res2.returncode == 0, res2.stderr
    assert "## MNIST scaling" in res2.stdout and "busbw" in res2.stdout
    for framework in FRAMEWORKS:
        assert f"| local:default+hvdcore-venv {framework} | 2 |" in res2.stdout, res2.stdout


def test_broken_environment_fails_capability_check_with_reason(tmp_path: Path) -> None:
    """A partition that claims NVIDIA GPUs hvdcore cannot use: the check fails and says why."""
    config = ROOT / "tests" / "reframe_configs" / "claims_gpu.py"
    report = tmp_path / "report.json"
    res = run_reframe(["-C", str(config), "-c", str(CHECKS / "hvdcore_capabilities.py"),
                       "-n", "framework=torch", "-r", "--report-file", str(report)], tmp_path,
                      reframe_env(), timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    assert "FAILED" in out
    reason = next(line for line in out.splitlines() if "Reason: sanity error" in line)
    assert "claimsgpu:fakegpu requires torch, cuda, nccl, mpi" in reason
    # The reasons are hvdcore's own (from hvdcorerun --check-build --json), not a generic text.
    assert "cuda: not built:" in reason and "torch.version.cuda" in reason
    assert "nccl: not built:" in reason
    assert "mpi:" not in reason.split("missing:")[1]  # MPI is there: only what is missing

    # The summary a nightly job publishes says FAILED, where, and why; --fail-on-failure gates.
    tool = subprocess.run([sys.executable, str(REPORT_TOOL), "--report", str(report),
                           "--fail-on-failure"], capture_output=True, text=True, timeout=120)
    assert tool.returncode == 1, tool.stderr
    assert "**FAILED**: 0 passed, 1 failed" in tool.stdout
    row = next(line for line in tool.stdout.splitlines() if "claimsgpu:fakegpu" in line)
    assert "| fail |" in row and "sanity: sanity error" in row and "cuda: not built" in row
