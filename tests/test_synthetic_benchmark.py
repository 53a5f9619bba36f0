"""The synthetic benchmarks (examples/*_synthetic_benchmark.py) under real mpirun, and their
ReFrame check (checks/hvdcore_synthetic.py) run for real on the local config: it passes, and a
site reference it cannot meet makes it FAIL on that variable.

Tiny settings (32 px images, a few steps): the tests assert the output format and that every
figure is a positive measurement, never a speed.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_mpi
from reframe_helpers import CHECKS, CONFIGS, TOOLS, reframe_env, run_reframe

pytest.importorskip("torch")
pytestmark = [pytest.mark.mpi]

TORCH_EXAMPLE = ROOT / "examples" / "pytorch_synthetic_benchmark.py"
KERAS_EXAMPLE = ROOT / "examples" / "keras_synthetic_benchmark.py"
HAVE_TF = importlib.util.find_spec("tensorflow") is not None
HAVE_TF_KERAS = HAVE_TF and importlib.util.find_spec("tf_keras") is not None
#: Seconds of work, not a measurement: 1 warm-up step, 2 timed iterations of 1 step.
TINY = ["--image-size", "32", "--batch-size", "2", "--num-warmup-batches", "1",
        "--num-iters", "2", "--num-batches-per-iter", "1"]

SUMMARY = re.compile(
    r"^hvdcore-synthetic: framework=(?P<framework>\w+) model=(?P<model>\w+) "
    r"parameters=(?P<params>\d+) ranks=(?P<ranks>\d+) device=cpu batch_size=2 image_size=32 "
    r"timed_steps=2 timed_seconds=(?P<secs>[0-9.]+) images_per_sec_per_rank=(?P<ipr>[0-9.]+) "
    r"images_per_sec_per_rank_conf=[0-9.]+ total_images_per_sec=(?P<ips>[0-9.]+) "
    r"total_images_per_sec_conf=[0-9.]+$", re.M)


def _check_output(stdout: str, np: int, framework: str, model: str) -> re.Match[str]:
    """The summary, per-rank, per-iteration and Horovod-style lines of one run."""
    m = SUMMARY.search(stdout)
    assert m, stdout[-3000:]
    assert (m["framework"], m["model"], int(m["ranks"])) == (framework, model, np)
    ips, ipr = float(m["ips"]), float(m["ipr"])
    assert ips > 0 and float(m["secs"]) > 0
    assert ipr == pytest.approx(ips / np, abs=0.02)
    ranks = re.findall(r"^hvdcore-synthetic-rank: rank=(\d+) images_per_sec=([0-9.]+) "
                       r"conf=[0-9.]+$", stdout, re.M)
    assert [int(r) for r, _ in ranks] == list(range(np)) and all(float(v) > 0 for _, v in ranks)
    # the total is the sum over ranks (means over the same iterations)
    assert sum(float(v) for _, v in ranks) == pytest.approx(ips, rel=1e-3, abs=0.05)
    iters = re.findall(r"^hvdcore-synthetic-iter: iter=(\d+) images_per_sec_per_rank=[0-9.]+ "
                       r"total_images_per_sec=[0-9.]+$", stdout, re.M)
    assert iters == ["0", "1"], stdout[-2000:]
    assert re.search(rf"^Total img/sec on {np} rank\(s\): [0-9.]+ \+-[0-9.]+$", stdout, re.M)
    assert re.search(r"^Img/sec per rank: [0-9.]+ \+-[0-9.]+$", stdout, re.M)
    return m


@pytest.mark.torch
@pytest.mark.parametrize("np", [1, 2], ids=lambda n: f"np{n}")
def test_torch_benchmark(np: int) -> None:
    """np 1: the real ResNet-50 (torchvision's 25,557,032 parameters); np 2: a narrow, shallow
    member of the same family, as CI uses it."""
    model = ["--model", "resnet50"] if np == 1 else ["--model", "tiny", "--width", "8"]
    proc = run_mpi(np, [str(TORCH_EXAMPLE), *model, *TINY, "--threads", "1"], timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = _check_output(proc.stdout, np, "torch", model[1])
    if np == 1:
        assert int(m["params"]) == 25_557_032


@pytest.mark.tensorflow
def test_keras_benchmark_tf_keras_np2() -> None:
    """tf-keras (where installed, else Keras 3) with MobileNetV2(weights=None) on 2 ranks.

    Keras 3 with ResNet50 at 1 and 2 ranks runs in the ReFrame check below (its baseline and
    scaled run), whose job outputs are held to the same format.
    """
    if not HAVE_TF:
        pytest.skip("TensorFlow is not installed")
    flavour = "tf-keras" if HAVE_TF_KERAS else "keras3"
    proc = run_mpi(2, [str(KERAS_EXAMPLE), "--model", "MobileNetV2", "--keras", flavour, *TINY,
                       "--threads", "1"], timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _check_output(proc.stdout, 2, "tensorflow", "MobileNetV2")
    assert f"parameters, {flavour})" in proc.stdout


def test_help_and_bad_options() -> None:
    for example in (TORCH_EXAMPLE, KERAS_EXAMPLE):
        helped = subprocess.run([sys.executable, str(example), "--help"], capture_output=True,
                                text=True, timeout=120)
        assert helped.returncode == 0, helped.stderr
        for option in ("--model", "--image-size", "--batch-size", "--num-warmup-batches",
                       "--num-batches-per-iter", "--num-iters", "--threads"):
            assert option in helped.stdout, (example.name, option)
        bad = subprocess.run([sys.executable, str(example), "--batch-size", "0"],
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and "--batch-size must be at least 1" in bad.stderr


#: The framework whose scaled check gets an impossible reference (the FAIL demonstration);
#: the other framework's variant must pass.
FAILING = "tensorflow" if HAVE_TF else "torch"


@pytest.fixture(scope="module")
def reframe_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``reframe -C checks/config/local.py -c checks/hvdcore_synthetic.py -r`` with tiny settings
    and recorded references (``$CHECKS_REFERENCES_DIR``) asking 10^9 images/s of one variant."""
    work = tmp_path_factory.mktemp("rfm-synthetic")
    refs = work / "references"
    refs.mkdir()
    (refs / "local.json").write_text(json.dumps({"default": {
        f"HvdcoreSyntheticCheck@framework={FAILING}": {
            "total_images_per_sec": [1e9, -0.3, None, "img/s"]}}}))
    report = work / "report.json"
    tiny = ["image_size=32", "batch_size=2", "num_warmup_batches=1", "num_iters=2",
            "num_batches_per_iter=1", "min_window_s=0",
            # a 2-step window on 2 shared cores is noise: not a measurement of efficiency
            "HvdcoreSyntheticCheck.max_valid_efficiency=1000",
            "HvdcoreSyntheticCheck.max_timing_noise=1000"]
    res = run_reframe(["-C", str(CONFIGS / "local.py"), "-c", str(CHECKS / "hvdcore_synthetic.py"),
                       "-r", "--report-file", str(report), *[a for s in tiny for a in ("-S", s)]],
                      work, reframe_env({"CHECKS_REFERENCES_DIR": str(refs)}), timeout=600)
    cases = {tc["display_name"]: tc for run in json.loads(report.read_text())["runs"]
             for tc in run["testcases"]}
    return {"res": res, "cases": cases, "report": report}


def _case(cases: dict, prefix: str) -> dict:
    found = [tc for name, tc in cases.items() if name.startswith(prefix)]
    assert len(found) == 1, (prefix, list(cases))
    return found[0]


def _job_stdout(case: dict) -> str:
    """A case's job output: its output directory, or its stage directory where ReFrame kept
    that (a failed case, or a fixture whose dependent failed)."""
    for where in ("outputdir", "stagedir"):
        path = Path(case[where] or "") / case["job_stdout"]
        if case[where] and path.is_file():
            return path.read_text()
    raise AssertionError(f"no job output for {case['display_name']}")


def _perf(case: dict) -> dict[str, list]:
    return {k.split(":")[-1]: v for k, v in (case["perfvalues"] or {}).items()}


@pytest.mark.reframe
@pytest.mark.torch
@pytest.mark.slow
def test_reframe_check_passes(reframe_run: dict) -> None:
    """Every case passes but the one given an impossible reference; values are measured."""
    cases = reframe_run["cases"]
    out = reframe_run["res"].stdout
    frameworks = ["torch", "tensorflow"] if HAVE_TF else ["torch"]
    assert len(cases) == 2 * len(frameworks), list(cases)
    for fw in frameworks:
        base = _case(cases, f"SyntheticBaseline %framework={fw} ")
        check = _case(cases, f"HvdcoreSyntheticCheck %scale=1_node %baseline.framework={fw} ")
        assert base["result"] == "pass", base["fail_reason"]
        assert (base["num_tasks"], check["num_tasks"]) == (1, 2)
        if fw != FAILING:
            assert check["result"] == "pass", check["fail_reason"]
        perf, base_perf = _perf(check), _perf(base)
        assert set(perf) == {"total_images_per_sec", "images_per_sec_per_rank", "efficiency"}
        assert set(base_perf) == {"total_images_per_sec", "images_per_sec_per_rank"}
        assert all(v[0] > 0 for v in [*perf.values(), *base_perf.values()]), (perf, base_perf)
        assert perf["efficiency"][0] == pytest.approx(
            100 * perf["images_per_sec_per_rank"][0] / base_perf["images_per_sec_per_rank"][0],
            abs=0.01)
        # the same experiment at both scales: settings and threads per rank
        assert base["executable_opts"] == check["executable_opts"]
        assert "--threads=1" in check["executable_opts"]
        assert any("_synthetic_benchmark.py" in o for o in check["executable_opts"])
        # both examples' output at 1 and 2 ranks under mpirun (Keras 3 for tensorflow)
        model = "resnet50" if fw == "torch" else "ResNet50"
        params = 25_557_032 if fw == "torch" else 25_636_712
        for tc, np in ((base, 1), (check, 2)):
            text = _job_stdout(tc)
            assert int(_check_output(text, np, fw, model)["params"]) == params
    assert re.search(r"Ran 4/4 test case|Ran 2/2 test case", out), out[-2000:]


@pytest.mark.reframe
@pytest.mark.torch
@pytest.mark.slow
def test_reframe_check_fails_below_a_reference(reframe_run: dict, tmp_path: Path) -> None:
    """A recorded reference the run cannot meet: FAILED in the performance stage, naming the
    variable, its value and the bound; sanity had passed; the report tool says **FAIL**."""
    res, cases = reframe_run["res"], reframe_run["cases"]
    assert res.returncode != 0
    check = _case(cases, f"HvdcoreSyntheticCheck %scale=1_node %baseline.framework={FAILING} ")
    assert (check["result"], check["fail_phase"]) == ("fail", "performance"), check
    assert re.search(r"total_images_per_sec=[0-9.]+ img/s, expected 1000000000(\.0)? "
                     r"\(l=700000000(\.0)?, u=inf\)", check["fail_reason"]), check["fail_reason"]
    summary = subprocess.run([sys.executable, str(TOOLS / "report.py"), "--report",
                              str(reframe_run["report"]), "--fail-on-failure"],
                             capture_output=True, text=True, timeout=120)
    assert summary.returncode == 1, summary.stderr
    row = next(line for line in summary.stdout.splitlines()
               if "| total_images_per_sec |" in line and "**FAIL**" in line)
    assert "| 1.000e+09 | >= 7.000e+08 | **FAIL** |" in row, row
