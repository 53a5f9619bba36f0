"""The pure pieces of the checks: scales, capability rules against a real hvdcore report."""

# Over 400 lines on purpose: the unit tests of every pure piece of checks/ (scales, rules,
# references, report); each test is short and independent.

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from reframe_helpers import CHECKS, ROOT, reframe_env

from hvdcore_checks.capability_rules import evaluate_report, required_capabilities
from hvdcore_checks.discovery import module_frameworks
from hvdcore_checks.examples import (
    EXAMPLES_DIR,
    MNIST_EXAMPLES,
    RESULT_PATTERN,
    locate_examples,
)
from hvdcore_checks.scales import SCALES, layout
from hvdcore_checks.validity import NOISE_PATTERN, efficiency_bound, invalid_efficiency_message


def test_layout_of_each_scale() -> None:
    assert layout("1_rank", 4, 1) == (1, 1, 1)
    assert layout("2_ranks", 4, 1) == (2, 2, 1)
    assert layout("1_node", 4, 1) == (4, 4, 1)
    assert layout("2_nodes", 4, 2) == (8, 4, 2)
    # Not offered: more nodes than the partition has, sub-node scale as big as a node.
    assert "needs 4 nodes" in layout("4_nodes", 4, 2)
    assert "repeat 1_node" in layout("2_ranks", 2, 2)
    assert "repeat 1_node" in layout("4_ranks", 4, 2)
    assert "baseline itself" in layout("1_node", 1, 1)  # one GPU per node, one node
    assert layout("2_nodes", 1, 2) == (2, 1, 2)
    assert list(SCALES)[0] == "1_rank"
    with pytest.raises(KeyError, match="unknown scale"):
        layout("3_nodes", 4, 8)
    with pytest.raises(ValueError, match="ranks_per_node"):
        layout("1_node", 0, 1)


def test_required_capabilities_from_features() -> None:
    assert required_capabilities(["cpu", "mpi"], {}, "torch") == ["torch", "mpi"]
    assert required_capabilities(["gpu", "nvgpu", "mpi", "cuda-aware-mpi"], {}, "torch") == [
        "torch", "cuda", "nccl", "mpi", "cuda-aware-mpi"]
    assert required_capabilities(["gpu", "amdgpu"], {}, "tensorflow") == [
        "tensorflow", "rocm", "nccl"]
    assert required_capabilities(["gpu"], {"hvdcore_require": ["gloo"]}, "torch") == [
        "torch", "cuda|rocm", "nccl", "gloo"]


@pytest.fixture(scope="module")
def real_report() -> dict:
    """This host's report from the real ``hvdcorerun --check-build --json``."""
    res = subprocess.run([sys.executable, "-m", "hvdcore.runner", "--check-build", "--json",
                          "--require=mpi,torch,cuda,rocm,nccl"], cwd=ROOT, env=reframe_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.stdout.strip().startswith("{"), res.stdout + res.stderr
    return json.loads(res.stdout)


def test_cpu_partition_passes_on_this_host(real_report: dict) -> None:
    req = required_capabilities(["cpu", "mpi"], {}, "torch")
    assert evaluate_report(real_report, req, ["cpu", "mpi"], 0) == []


def test_gpu_claims_fail_with_hvdcore_reasons(real_report: dict) -> None:
    feats = ["gpu", "nvgpu", "mpi"]
    problems = evaluate_report(real_report, required_capabilities(feats, {}, "torch"), feats, 4)
    assert [p.split(":")[0] for p in problems] == ["cuda", "nccl"]
    assert all("not built" in p and len(p) > 30 for p in problems), problems
    # Vendor-neutral "gpu": either CUDA or ROCm would do; both missing -> both reasons.
    both = evaluate_report(real_report, ["cuda|rocm"], ["gpu"], 1)
    assert len(both) == 1 and "cuda:" in both[0] and "rocm:" in both[0]


def test_partition_must_not_claim_gpus_it_does_not_configure(real_report: dict) -> None:
    problems = evaluate_report(real_report, ["mpi"], ["gpu", "nvgpu"], 0)
    assert problems and "claims GPUs" in problems[0]
    problems = evaluate_report(real_report, ["mpi"], ["cpu"], 2)
    assert problems and "no gpu feature" in problems[0]
    assert "not in the report" in evaluate_report(real_report, ["warp-drive"], [], 0)[0]


def test_module_names_say_their_framework() -> None:
    assert module_frameworks("hvdcore/0.2.0-foss-2023a-TensorFlow-2.13.0") == {"tensorflow"}
    assert module_frameworks("hvdcore/0.2.0-foss-2023a-CUDA-12.1.1-PyTorch-2.1.2") == {"torch"}
    assert module_frameworks("hvdcore/0.2.0-foss-2023a") == set()
    assert module_frameworks("hvdcore/0.2.0-tensorflow-2.15") == {"tensorflow"}
    assert module_frameworks("hvdcore/0.2.0-PyTorchLightning") == set()  # whole words only


def _where(tmp_path: Path, ebroot: str | None, script: str = "keras_mnist.py") -> str:
    env = {"PATH": "/usr/bin:/bin"}
    if ebroot is not None:
        env["EBROOTHVDCORE"] = ebroot
    res = subprocess.run(["bash", "-euc", "\n".join([*locate_examples(script),
                                                     'echo "DIR=$MNIST_EXAMPLES"'])],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert f"hvdcore-mnist-examples: {res.stdout.split('DIR=')[1].strip()}" in res.stdout
    return res.stdout.split("DIR=")[1].strip()


def test_job_finds_the_installed_examples_else_the_staged_ones(tmp_path: Path) -> None:
    """The job-script lines, run by bash: $EBROOTHVDCORE/share/hvdcore/examples, then
    $EBROOTHVDCORE/examples, then the stage directory (the job's working directory)."""
    stage = tmp_path / "stage"
    stage.mkdir()
    root = tmp_path / "soft"
    assert _where(stage, None) == str(stage)  # no module: the staged repository copy
    assert _where(stage, str(root)) == str(stage)  # a module without examples (EasyBuild's)
    (root / "examples").mkdir(parents=True)
    (root / "examples" / "keras_mnist.py").write_text("")
    assert _where(stage, str(root)) == f"{root}/examples"
    shipped = root / "share" / "hvdcore" / "examples"
    shipped.mkdir(parents=True)
    (shipped / "pytorch_mnist.py").write_text("")
    assert _where(stage, str(root)) == f"{root}/examples"  # the script itself must be there
    (shipped / "keras_mnist.py").write_text("")
    assert _where(stage, str(root)) == str(shipped)
    with pytest.raises(ValueError, match="file name"):
        locate_examples("../x.py; rm -rf /")


def test_both_examples_print_the_result_line_the_check_parses() -> None:
    for framework, example in MNIST_EXAMPLES.items():
        text = (Path(EXAMPLES_DIR) / example.script).read_text()
        # the documented sample line in each example's docstring matches the check's pattern
        sample = re.search(r"^\s*(hvdcore-mnist: ranks=.*)$", text, re.M)
        assert sample and re.fullmatch(RESULT_PATTERN, sample[1].strip()), framework
        noise = re.search(NOISE_PATTERN, sample[1])  # what the validity rule reads
        assert noise and float(noise["noise"]) > 0, framework
        assert "--max-steps-per-epoch" in text and "--seed" in text, framework


def _perflog(tmp_path: Path) -> Path:
    """Perflog lines (format of checks/config/common.py) of torch and tensorflow MNIST runs."""
    d = tmp_path / "perflogs" / "local" / "default"
    d.mkdir(parents=True)
    rows = []
    for fw, base, two in (("torch", 3000.0, 4800.0), ("tensorflow", 300.0, 420.0)):
        rows.append(f"2026-11-22T09:00:00|pass|MnistBaseline %framework={fw} "
                    f"%hvdcore_module=env ~local:default+hvdcore-venv|local:default|"
                    f"hvdcore-venv|1|images_per_sec={base}|0|None|None|img/s|"
                    f"images_per_sec_per_rank={base}|0|None|None|img/s")
        eff = 100 * two / 2 / base
        rows.append(f"2026-11-22T09:01:00|pass|HvdcoreMnistCheck %scale=1_node "
                    f"%baseline.framework={fw} %baseline.hvdcore_module=env|local:default|"
                    f"hvdcore-venv|2|efficiency={eff}|88.0|-0.9|None|%|images_per_sec={two}|0|"
                    f"None|None|img/s|images_per_sec_per_rank={two / 2}|0|None|None|img/s")
    (d / "HvdcoreMnistCheck.log").write_text("\n".join(rows) + "\n")
    return tmp_path / "perflogs"


def test_report_tool_separates_frameworks(tmp_path: Path) -> None:
    import report  # checks/tools/ (pytest's pythonpath)

    cases = report.load_perflogs(_perflog(tmp_path))
    series = report.scaling_points(cases)
    assert series == {
        "local:default+hvdcore-venv tensorflow": [(1, 300.0, 100.0), (2, 420.0, 70.0)],
        "local:default+hvdcore-venv torch": [(1, 3000.0, 100.0), (2, 4800.0, 80.0)],
    }
    assert {report.series_framework(k) for k in series} == {"torch", "tensorflow"}
    assert report.FRAMEWORK_STYLES["torch"] != report.FRAMEWORK_STYLES["tensorflow"]
    text = report.markdown_summary(cases)
    assert "| local:default+hvdcore-venv tensorflow | 2 | 420.0 | 210.0 | 70.0% |" in text
    assert "| local:default+hvdcore-venv torch | 2 | 4800.0 | 2400.0 | 80.0% |" in text
    png = tmp_path / "scaling.png"
    assert report.plot_scaling(cases, png) and png.read_bytes()[:4] == b"\x89PNG"
    # A discovered module gets its own series.
    named = report.Case("HvdcoreMnistCheck %scale=1_node %baseline.framework=torch "
                        "%baseline.hvdcore_module=hvdcore/0.2.0", "local", "default", "find",
                        "pass", num_tasks=2,
                        params=report._params("%baseline.framework=torch "
                                              "%baseline.hvdcore_module=hvdcore/0.2.0"),
                        perfvars=[report.PerfVar("images_per_sec", 10.0)])
    assert list(report.scaling_points([named])) == ["local:default+find torch hvdcore/0.2.0"]


# --- performance references and the report tool on ReFrame JSON reports -------------------

def _tools():
    import record_references  # checks/tools/ (pytest's pythonpath)
    import report

    return report, record_references


def _testcase(display_name: str, perf: dict[str, tuple] | None = None, result: str = "pass",
              num_tasks: int = 1, fail_phase: str | None = None, fail_reason: str | None = None,
              system: str = "site", partition: str = "cpu", fixture: bool = False) -> dict:
    """One test case as ReFrame 4.10 writes it to ``--report-file`` (the fields the tools read,
    copied from a real report). ``perf``: ``var -> (value, ref, lower, upper, unit)``; a value
    of None is what ReFrame stores when the case failed before its performance stage."""
    perfvalues = {}
    for var, (value, ref, low, high, unit) in (perf or {}).items():
        verdict = None
        if value is not None:
            lo_b, hi_b = (ref * (1 + low) if low is not None else None,
                          ref * (1 + high) if high is not None else None)
            inside = (lo_b is None or value >= lo_b) and (hi_b is None or value <= hi_b)
            verdict = "pass" if inside else "fail"
        perfvalues[f"{system}:{partition}:{var}"] = [value, ref, low, high, unit, verdict]
    case = {
        "build_jobid": None, "dependencies_actual": [], "environ": "hvdcore-venv",
        "fail_phase": fail_phase, "fail_reason": fail_reason, "fixture": fixture,
        "job_completion_time": "2026-11-23T13:11:56+00:00", "job_exitcode": 0,
        "job_nodelist": ["n1"], "jobid": "5052", "system": system, "partition": partition,
        "result": result, "run_index": 0, "scheduler": "slurm", "display_name": display_name,
        "name": display_name, "num_tasks": num_tasks, "perfvalues": perfvalues,
        "short_name": display_name.split()[0] + "_904c7f7f", "tags": [],
    }
    if result == "fail":
        case["fail_info"] = {"exc_type": "SanityError" if fail_phase == "sanity"
                             else "PerformanceError", "exc_value": fail_reason, "traceback": []}
    return case


def _write_report(path: Path, testcases: list[dict]) -> Path:
    fails = sum(tc["result"] == "fail" for tc in testcases)
    path.write_text(json.dumps({
        "session_info": {"data_version": "4.2", "hostname": "n1", "num_cases": len(testcases),
                         "num_failures": fails, "version": "4.10.4"},
        "runs": [{"num_cases": len(testcases), "num_failures": fails, "num_aborted": 0,
                  "num_skipped": 0, "run_index": 0, "testcases": testcases}],
        "restored_cases": [],
    }))
    return path


MNIST_1NODE = "HvdcoreMnistCheck %scale=1_node %baseline.framework=torch %baseline.hvdcore_module=env"
BASELINE = "MnistBaseline %framework=torch %hvdcore_module=env ~site:cpu+hvdcore-venv"


def _good_run(busbw: float = 10.0, latency: float = 50.0, ips: float = 4000.0) -> list[dict]:
    """A known-good run: collectives and MNIST (1 node of 2 ranks) pass; two other cases do
    not and must never become references."""
    return [
        _testcase("HvdcoreCollectivesCheck", {
            "busbw": (busbw, 0, None, None, "GB/s"), "latency": (latency, 0, None, None, "us"),
            "busbw_ratio": (0.9, 0.8, -0.2, None, "x"),
            "latency_ratio": (1.1, 1.0, None, 0.5, "x")}, num_tasks=2),
        _testcase(BASELINE, {"images_per_sec": (2200.0, 0, None, None, "img/s"),
                             "images_per_sec_per_rank": (2200.0, 0, None, None, "img/s")},
                  fixture=True),
        _testcase(MNIST_1NODE, {"images_per_sec": (ips, 0, None, None, "img/s"),
                                "images_per_sec_per_rank": (ips / 2, 0, None, None, "img/s"),
                                "efficiency": (90.0, 0, None, None, "%"),
                                "ddp_ratio": (0.95, 0.9, -0.1, None, "x")}, num_tasks=2),
        # failed in its performance stage: values present, not recorded
        _testcase("HvdcoreMnistCheck %scale=2_nodes %baseline.framework=torch "
                  "%baseline.hvdcore_module=env",
                  {"images_per_sec": (100.0, 7000.0, -0.3, None, "img/s")}, result="fail",
                  num_tasks=4, fail_phase="performance",
                  fail_reason="performance error: failed to meet reference(s): "
                              "images_per_sec=100.0 img/s, expected 7000.0 (l=4900.0, u=inf)"),
        # passed but impossible (a check without the > 105 % sanity rule): never recorded
        _testcase("HvdcoreMnistCheck %scale=1_node %baseline.framework=tensorflow "
                  "%baseline.hvdcore_module=env", {"efficiency": (120.0, 0, None, None, "%")},
                  num_tasks=2),
    ]


def test_reference_keys_and_lookup(tmp_path: Path) -> None:
    from hvdcore_checks.references import (
        LOWER_IS_BETTER,
        key_of_test,
        load_recorded,
        lookup,
        reference_key,
    )

    assert reference_key("HvdcoreCollectivesCheck", None, None) == "HvdcoreCollectivesCheck"
    assert (reference_key("HvdcoreMnistCheck", "1_node", "torch")
            == "HvdcoreMnistCheck@scale=1_node@framework=torch")
    assert key_of_test(MNIST_1NODE) == "HvdcoreMnistCheck@scale=1_node@framework=torch"
    assert key_of_test(BASELINE) == "MnistBaseline@framework=torch"
    assert key_of_test("HvdcoreCapabilitiesCheck %framework=tensorflow") == (
        "HvdcoreCapabilitiesCheck@framework=tensorflow")
    assert LOWER_IS_BETTER == {"latency", "latency_ratio"}
    assert load_recorded("nosuchsystem", tmp_path) == {}
    refs = {
        "HvdcoreMnistCheck": {"efficiency": [88.0, -0.5, None, "%"]},
        "HvdcoreMnistCheck@scale=1_node": {"efficiency": [88.0, None, None, "%"]},
        "HvdcoreMnistCheck@scale=1_node@framework=torch": {
            "images_per_sec": [4000.0, -0.3, None, "img/s"]},
    }
    # the most specific entry wins per variable; more general ones fill in
    assert lookup(refs, "HvdcoreMnistCheck@scale=1_node@framework=torch") == {
        "efficiency": (88.0, None, None, "%"), "images_per_sec": (4000.0, -0.3, None, "img/s")}
    assert lookup(refs, "HvdcoreMnistCheck@scale=2_nodes@framework=torch") == {
        "efficiency": (88.0, -0.5, None, "%")}
    assert lookup(refs, "HvdcoreCollectivesCheck") == {}
    assert lookup({}, "HvdcoreCollectivesCheck") == lookup(None, "X") == {}
    # the module must stay importable without ReFrame (configs and tools load it by path)
    text = (CHECKS / "hvdcore_checks" / "references.py").read_text()
    assert "import reframe" not in text and "from reframe" not in text


def test_record_references_bounds_on_the_bad_side(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _, rec = _tools()
    good = _write_report(tmp_path / "good.json", _good_run())
    out_dir = tmp_path / "refs"
    assert rec.main(["--report", str(good), "--output-dir", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    data = json.loads((out_dir / "site.json").read_text())
    assert list(data) == ["cpu"]
    assert data["cpu"] == {
        "HvdcoreCollectivesCheck": {"busbw": [10.0, -0.3, None, "GB/s"],
                                    "latency": [50.0, None, 0.3, "us"]},
        "HvdcoreMnistCheck@scale=1_node@framework=torch": {
            "efficiency": [90.0, None, None, "%"],
            "images_per_sec": [4000.0, -0.3, None, "img/s"],
            "images_per_sec_per_rank": [2000.0, -0.3, None, "img/s"]},
        "MnistBaseline@framework=torch": {
            "images_per_sec": [2200.0, -0.3, None, "img/s"],
            "images_per_sec_per_rank": [2200.0, -0.3, None, "img/s"]},
    }
    # the table says what was recorded and why the impossible efficiency was not
    assert "HvdcoreCollectivesCheck" in printed and ">= 7 (-30%)" in printed
    assert "<= 65 (+30%)" in printed
    assert "120.0% > 105%: invalid measurement, not recorded" in printed
    assert "none: information, never judged" in printed
    assert "*_ratio variables left to the checks" in printed

    # ratios on request, each in its own direction; a tighter tolerance
    assert rec.main(["--report", str(good), "--output-dir", str(out_dir), "--include-ratios",
                     "--tolerance", "0.1"]) == 0
    cpu = json.loads((out_dir / "site.json").read_text())["cpu"]
    assert cpu["HvdcoreCollectivesCheck"]["busbw_ratio"] == [0.9, -0.1, None, "x"]
    assert cpu["HvdcoreCollectivesCheck"]["latency_ratio"] == [1.1, None, 0.1, "x"]
    assert cpu["HvdcoreCollectivesCheck"]["latency"] == [50.0, None, 0.1, "us"]
    assert cpu["HvdcoreMnistCheck@scale=1_node@framework=torch"]["ddp_ratio"][1] == -0.1

    # nothing passed: nothing written, exit 2
    bad = _write_report(tmp_path / "bad.json", _good_run()[3:4])
    assert rec.main(["--report", str(bad), "--output-dir", str(tmp_path / "none")]) == 2
    assert not (tmp_path / "none").exists()


def test_record_references_median_and_spread(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Three known-good nights: the median, and bounds every one of them passes."""
    from reframe.utility.sanity import reference_bounds

    _, rec = _tools()
    nights = [(10.0, 50.0, 4000.0), (8.0, 40.0, 3900.0), (12.0, 70.0, 4100.0)]
    reports = [_write_report(tmp_path / f"n{i}.json", _good_run(*night))
               for i, night in enumerate(nights)]
    args = [a for r in reports for a in ("--report", str(r))]
    assert rec.main([*args, "--output-dir", str(tmp_path), "--tolerance", "0.1"]) == 0
    printed = capsys.readouterr().out
    coll = json.loads((tmp_path / "site.json").read_text())["cpu"]["HvdcoreCollectivesCheck"]
    # busbw: median 10, the 8 needs -20 %; latency: median 50, the 70 needs +40 %
    assert coll["busbw"] == [10.0, -0.2, None, "GB/s"]
    assert coll["latency"] == [50.0, None, 0.4, "us"]
    mnist = json.loads((tmp_path / "site.json").read_text())["cpu"][
        "HvdcoreMnistCheck@scale=1_node@framework=torch"]
    assert mnist["images_per_sec"] == [4000.0, -0.1, None, "img/s"]  # 3900 is within 10 %
    for var, values in (("busbw", [n[0] for n in nights]), ("latency", [n[1] for n in nights])):
        low, high = reference_bounds(*coll[var][:3])
        assert all(low <= v <= high for v in values), (var, coll[var])
    assert printed.count("tolerance widened from 0.10 to cover the spread") >= 2, printed
    assert "3: 8..12" in printed and "3: 40..70" in printed


def test_record_references_merge(tmp_path: Path) -> None:
    _, rec = _tools()
    good = _write_report(tmp_path / "good.json", _good_run())
    old = {"gpu": {"HvdcoreCollectivesCheck": {"busbw": [90.0, -0.3, None, "GB/s"]}},
           "cpu": {"OldCheck": {"busbw": [1.0, -0.3, None, "GB/s"]},
                   "HvdcoreCollectivesCheck": {"busbw": [1.0, -0.5, None, "GB/s"]}}}
    (tmp_path / "site.json").write_text(json.dumps(old))
    assert rec.main(["--report", str(good), "--output-dir", str(tmp_path), "--merge"]) == 0
    merged = json.loads((tmp_path / "site.json").read_text())
    assert merged["gpu"] == old["gpu"]  # another partition: kept
    assert merged["cpu"]["OldCheck"] == old["cpu"]["OldCheck"]  # not recorded now: kept
    assert merged["cpu"]["HvdcoreCollectivesCheck"]["busbw"] == [10.0, -0.3, None, "GB/s"]
    # without --merge the file holds this run only; --dry-run writes nothing
    before = (tmp_path / "site.json").read_text()
    assert rec.main(["--report", str(good), "--output-dir", str(tmp_path), "--dry-run"]) == 0
    assert (tmp_path / "site.json").read_text() == before
    assert rec.main(["--report", str(good), "--output-dir", str(tmp_path)]) == 0
    assert list(json.loads((tmp_path / "site.json").read_text())) == ["cpu"]
    assert "OldCheck" not in (tmp_path / "site.json").read_text()
    # the tool's help is its manual
    help_text = subprocess.run([sys.executable, str(CHECKS / "tools" / "record_references.py"),
                                "--help"], capture_output=True, text=True, timeout=60).stdout
    for word in ("--tolerance", "--include-ratios", "--merge", "@scale=", "median"):
        assert word in help_text, help_text


def test_configs_take_recorded_references(tmp_path: Path) -> None:
    """common.py hands a partition its recorded entries; fake nodes on one host get an
    unjudged MNIST efficiency, whatever was recorded."""
    import common  # checks/config/ (pytest's pythonpath)

    from hvdcore_checks.references import lookup

    recorded = {"cpu": {
        "HvdcoreMnistCheck@scale=1_node@framework=torch": {
            "efficiency": [91.0, -0.3, None, "%"], "images_per_sec": [4000.0, -0.3, None, "img/s"]},
        "HvdcoreCollectivesCheck": {"busbw": [10.0, -0.3, None, "GB/s"]}}}
    (tmp_path / "generic.json").write_text(json.dumps(recorded))
    refs = common.recorded_references("generic", "cpu", str(tmp_path))
    assert refs == recorded["cpu"]
    assert common.recorded_references("generic", "gpu", str(tmp_path)) == {}
    assert common.recorded_references("nosuch", "cpu", str(tmp_path)) == {}
    one_host = common.unjudged_on_shared_cores(refs)
    assert refs == recorded["cpu"]  # not modified in place
    key = "HvdcoreMnistCheck@scale=1_node@framework=torch"
    assert lookup(one_host, key) == {"efficiency": (91.0, None, None, "%"),
                                     "images_per_sec": (4000.0, None, None, "img/s"),
                                     "ddp_ratio": (1.2, None, None, "x"),
                                     "mpi_ratio": (1.0, None, None, "x")}
    for scale in ("2_ranks", "1_node", "2_nodes", "16_nodes"):
        got = lookup(one_host, f"HvdcoreMnistCheck@scale={scale}@framework=tensorflow")
        assert got["efficiency"][1:3] == (None, None), scale
    assert lookup(one_host, "HvdcoreCollectivesCheck") == {
        "busbw": (10.0, None, None, "GB/s"), "busbw_ratio": (0.9, None, None, "x"),
        "latency_ratio": (5.5, None, None, "x")}


def test_one_host_leaves_every_planes_figure_unjudged() -> None:
    """The data-plane check's judged figures (its PLANES x OPS, read from the check's source)
    get unbounded entries on shared cores, as the Slurm config's docstring says."""
    import ast

    import common

    from hvdcore_checks.references import lookup

    tree = ast.parse((CHECKS / "hvdcore_planes.py").read_text())
    consts = {t.id: ast.literal_eval(node.value) for node in tree.body
              if isinstance(node, ast.Assign) for t in node.targets
              if isinstance(t, ast.Name) and t.id in ("PLANES", "OPS")}
    refs = lookup(common.unjudged_on_shared_cores({}), "HvdcoreDataPlanesCheck")
    for plane in consts["PLANES"]:
        for op in consts["OPS"]:
            for var in (f"{plane}_{op}_ratio", f"{plane}_{op}_link_fraction"):
                assert refs[var][1:3] == (None, None), var


def test_docs_never_call_an_information_variable_judged() -> None:
    """``efficiency`` is information (references.INFORMATION_ONLY, its bounds dropped by the
    jobs): a doc example with bounds for it says they are dropped; no row says it is judged."""
    from hvdcore_checks.references import INFORMATION_ONLY

    for doc in (CHECKS / "README.md", ROOT / "docs" / "sites" / "checks.md",
                ROOT / "docs" / "sites" / "references.md"):
        text = doc.read_text()
        for var in INFORMATION_ONLY:
            for entry in re.findall(rf'"{var}": (\[[^\]]*\])', text):
                assert (json.loads(entry)[1:3] == [None, None]
                        or f"`{var}` entry's bounds are dropped" in text), (doc.name, entry)
            # its clause of a table cell (up to "|" or ";"), and its own row of a table
            claims = re.findall(rf"`{var}`[^|;\n]*", text) + re.findall(
                rf"^\| `{var}` \|.*$", text, re.M)
            for claim in claims:
                assert "against recorded references" not in claim, (doc.name, claim)


def _judged_run() -> list[dict]:
    """A night with every kind of verdict: perf failures, invalid, unjudged, no reference."""
    mnist = ("HvdcoreMnistCheck %scale={} %baseline.framework=torch "
             "%baseline.hvdcore_module=env")
    return [
        _testcase("HvdcoreCollectivesCheck", {
            "busbw": (2.5, 2.0, -0.3, None, "GB/s"), "latency": (40.0, 30.0, None, 0.1, "us"),
            "latency_ratio": (1.2, 1.0, None, 0.5, "x")}, result="fail", num_tasks=2,
            fail_phase="performance",
            fail_reason="performance error: failed to meet reference(s): latency=40.0 us, "
                        "expected 30.0 (l=-inf, u=33.0)"),
        _testcase(BASELINE, {"images_per_sec": (1000.0, 0, None, None, "img/s")}, fixture=True),
        _testcase(mnist.format("2_ranks"), {
            "images_per_sec": (1800.0, 1900.0, -0.3, None, "img/s"),
            "efficiency": (90.0, 88.0, None, None, "%")}, num_tasks=2),
        _testcase(mnist.format("4_ranks"), {
            "images_per_sec": (2000.0, 2200.0, -0.3, None, "img/s"),
            "efficiency": (50.0, 88.0, -0.15, None, "%")}, result="fail", num_tasks=4,
            fail_phase="performance",
            fail_reason="performance error: failed to meet reference(s): efficiency=50.0 %, "
                        "expected 88.0 (l=74.8, u=inf)"),
        _testcase(mnist.format("1_node"), {
            "images_per_sec": (None, 7000.0, -0.3, None, "img/s"),
            "efficiency": (None, 88.0, -0.15, None, "%")}, result="fail", num_tasks=8,
            fail_phase="sanity",
            fail_reason="sanity error: " + invalid_efficiency_message(105.0, 0.0, 3.0).format(
                130.0, 105.0)),
        _testcase(mnist.format("2_nodes"), {
            "images_per_sec": (17600.0, 0, None, None, "img/s"),
            "efficiency": (110.0, 0, None, None, "%")}, num_tasks=16),
    ]


def test_report_shows_every_verdict(tmp_path: Path) -> None:
    report, _ = _tools()
    path = _write_report(tmp_path / "night.json", _judged_run())
    cases = report.load_report(path)
    text = report.markdown_summary(cases)
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 9 and cells[3] not in ("Variable", "---"):
            rows[(cells[0].split()[0] + " " + (re.findall(r"scale=(\S+)", cells[0]) or [""])[0],
                  cells[3])] = cells
    assert rows[("HvdcoreCollectivesCheck ", "latency")][4:] == [
        "40", "us", "30", "<= 33", "**FAIL**"]
    assert rows[("HvdcoreCollectivesCheck ", "busbw")][7:] == [">= 1.4", "pass"]
    assert rows[("HvdcoreCollectivesCheck ", "latency_ratio")][8] == "pass"
    assert rows[("MnistBaseline ", "images_per_sec")][8] == "not judged (no reference)"
    assert rows[("HvdcoreMnistCheck 2_ranks", "efficiency")][8] == "not judged (no bounds)"
    assert rows[("HvdcoreMnistCheck 4_ranks", "efficiency")][4:] == [
        "50", "%", "88", ">= 74.8", "**FAIL**"]
    # failed sanity: no values in the report; the reason gives the invalid efficiency
    assert rows[("HvdcoreMnistCheck 1_node", "efficiency")][4] == "130"
    assert rows[("HvdcoreMnistCheck 1_node", "efficiency")][8] == "**invalid**"
    assert rows[("HvdcoreMnistCheck 1_node", "images_per_sec")][8] == "no value (sanity failed)"
    # passed, but impossible
    assert rows[("HvdcoreMnistCheck 2_nodes", "efficiency")][8] == "**invalid**"
    assert "Performance values: 4 within their bounds, 2 out of bounds, 2 invalid, " in text
    # the results table keeps the reasons
    assert ("| fail | sanity: sanity error: invalid measurement: scaling efficiency 130.0% is "
            "above 105.0%") in text
    # MNIST scaling with a verdict per point
    assert "| Series | Ranks | Images/s | Images/s per rank | Efficiency | Verdict |" in text
    series = "site:cpu+hvdcore-venv torch"
    for row in (f"| {series} | 1 | 1000.0 | 1000.0 | 100.0% | pass |",
                f"| {series} | 2 | 1800.0 | 900.0 | 90.0% | pass (efficiency not judged) |",
                f"| {series} | 4 | 2000.0 | 500.0 | 50.0% | **FAIL** (efficiency) |",
                f"| {series} | 8 | - | - | 130.0% (invalid) | **invalid**: efficiency 130.0% > 105% |",
                f"| {series} | 16 | 17600.0 | 1100.0 | 110.0% (invalid) | **invalid**: "
                "efficiency 110.0% > 105% |"):
        assert row in text, text
    # the line goes through measurements (failed ones too), never through an invalid one
    assert report.scaling_points(cases) == {
        series: [(1, 1000.0, 100.0), (2, 1800.0, 90.0), (4, 2000.0, 50.0)]}


def test_report_plot_marks_failed_and_invalid_points(tmp_path: Path) -> None:
    report, _ = _tools()
    cases = report.load_report(_write_report(tmp_path / "night.json", _judged_run()))
    fig = report.scaling_figure(cases)
    ax_ips, ax_eff = fig.axes
    series = [ln for ln in ax_eff.lines if ln.get_label().startswith("site:cpu")]
    assert len(series) == 1 and list(series[0].get_xdata()) == [1, 2, 4]
    assert max(series[0].get_ydata()) <= 105
    red_x = [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in ax_eff.lines
             if ln.get_marker() == "x" and ln.get_color() == "red"]
    assert red_x == [(4, 50.0)]
    hollow = sorted((ln.get_xdata()[0], ln.get_ydata()[0]) for ln in ax_eff.lines
                    if ln.get_markerfacecolor() == "none")
    assert hollow == [(8, 130.0), (16, 110.0)]
    assert [t.get_text() for t in ax_eff.texts] == ["invalid", "invalid"]
    assert "invalid" in [t.get_text() for t in ax_ips.texts]  # 16 ranks: images/s off the line
    legend = [t.get_text() for t in ax_eff.get_legend().get_texts()]
    assert "failed" in legend and "invalid measurement" in legend
    import matplotlib.pyplot as plt

    plt.close(fig)
    png = tmp_path / "scaling.png"
    assert report.plot_scaling(cases, png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_fail_on_failure_and_rows_from_reasons(tmp_path: Path) -> None:
    report, _ = _tools()
    tool = CHECKS / "tools" / "report.py"
    night = _write_report(tmp_path / "night.json", _judged_run())
    res = subprocess.run([sys.executable, str(tool), "--report", str(night),
                          "--fail-on-failure"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "**FAILED**: 3 passed, 3 failed" in res.stdout, res.stdout
    # every case passed, but one efficiency is impossible: still not a clean bill
    only_invalid = _write_report(tmp_path / "inv.json", [_judged_run()[1], _judged_run()[5]])
    res = subprocess.run([sys.executable, str(tool), "--report", str(only_invalid),
                          "--fail-on-failure"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "1 invalid" in res.stdout, res.stdout
    res = subprocess.run([sys.executable, str(tool), "--report", str(only_invalid)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0
    # a report without performance values for a failed case (older layouts): the row comes
    # from the failure reason
    bare = _testcase("HvdcoreMnistCheck %scale=1_node %baseline.framework=torch", result="fail",
                     num_tasks=4, fail_phase="sanity",
                     fail_reason="sanity error: " + invalid_efficiency_message(
                         105.0, 0.0, 3.0).format(140.5, 105.0))
    del bare["perfvalues"]
    cases = report.load_report(_write_report(tmp_path / "bare.json", [bare]))
    text = report.markdown_summary(cases)
    assert "| efficiency | 140.5 |  | - | - | **invalid** |" in text, text
    assert "| 4 | - | - | 140.5% (invalid) | **invalid**: efficiency 140.5% > 105% |" in text


def test_validity_bound_widens_with_the_runs_noise() -> None:
    assert efficiency_bound(105.0, [0.0, 0.0]) == 105.0
    # root sum of squares: 0.03 and 0.04 combine to 0.05; 3 sigma (the default) -> 105 * 1.15
    assert efficiency_bound(105.0, [0.03, 0.04]) == 120.75
    assert efficiency_bound(105.0, [0.03, 0.04], sigmas=2) == 115.5
    assert efficiency_bound(1000.0, [0.1]) == 1300.0
    for bad in ([-0.1, 0.0], [float("nan"), 0.0], [float("inf")]):
        with pytest.raises(ValueError, match="timing noise"):
            efficiency_bound(105.0, bad)
    msg = invalid_efficiency_message(105.0, 0.05, 3.0)
    assert msg.startswith("invalid measurement: scaling efficiency {0}% is above {1}% (105% "
                          "widened by 3 x the two runs' combined timing noise 0.050)"), msg


def test_report_widens_the_validity_bound_by_the_recorded_noise(tmp_path: Path) -> None:
    """An efficiency of 120 % is a measurement when the two runs' combined noise was 0.1
    (bound 136.5 %), and invalid at the same value without noise (perflogs, older reports)."""
    report, _ = _tools()
    mnist = "HvdcoreMnistCheck %scale={} %baseline.framework=torch %baseline.hvdcore_module=env"
    quiet = _testcase(mnist.format("2_ranks"), {
        "images_per_sec": (2400.0, 0, None, None, "img/s"),
        "efficiency": (120.0, 88.0, -0.15, None, "%")}, num_tasks=2)
    noisy = dict(quiet, display_name=mnist.format("4_ranks"), num_tasks=4, timing_noise=0.1)
    too_far = dict(noisy, display_name=mnist.format("1_node"), num_tasks=8, timing_noise=0.1,
                   perfvalues={"site:cpu:efficiency": [140.0, 88.0, -0.15, None, "%", "pass"],
                               "site:cpu:images_per_sec": [11200.0, 0, None, None, "img/s",
                                                           None]})
    base = _testcase(BASELINE, {"images_per_sec": (1000.0, 0, None, None, "img/s")},
                     fixture=True)
    cases = {c.num_tasks: c for c in report.load_report(
        _write_report(tmp_path / "noise.json", [base, quiet, noisy, too_far]))}
    assert (cases[2].efficiency_bound, cases[4].efficiency_bound) == (105.0, 136.5)
    verdicts = {n: report.perf_verdict(c, c.perfvar("efficiency"))
                for n, c in cases.items() if n > 1}
    assert verdicts == {2: "**invalid**", 4: "pass", 8: "**invalid**"}
    # noise above 0.3: no measurement, whatever the efficiency
    cases[4].timing_noise = 0.31
    assert report.perf_verdict(cases[4], cases[4].perfvar("efficiency")) == "**invalid**"
    assert "**invalid**: timing noise 0.310 > 0.3" in report.markdown_summary([cases[4]])
    cases[4].timing_noise = 0.1
    text = report.markdown_summary(list(cases.values()))
    series = "site:cpu+hvdcore-venv torch"
    assert (f"| {series} | 4 | 2400.0 | 600.0 | 120.0% | pass (above 105% within the runs' "
            "timing noise 0.100) |") in text, text
    assert "| 8 | 11200.0 | 1400.0 | 140.0% (invalid) | **invalid**: efficiency 140.0% > 136.5% |" \
        in text, text
    assert "| 2 | 2400.0 | 1200.0 | 120.0% (invalid) | **invalid**: efficiency 120.0% > 105% |" \
        in text, text


def test_every_check_variable_is_documented() -> None:
    """Every ``variable()`` of a check has a ``#:`` comment right above it (ReFrame's own
    convention) and a row in checks/README.md's table of check variables."""
    readme = (CHECKS / "README.md").read_text()
    table = readme[readme.index("## Check variables"):readme.index("## Imports")]
    found = []
    for path in sorted(CHECKS.glob("*.py")) + sorted((CHECKS / "faults").glob("*.py")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"\s+(\w+) = variable\(", line)
            if not m:
                continue
            found.append(m.group(1))
            assert lines[i - 1].strip().startswith("#:"), \
                f"{path.name}:{i + 1}: variable {m.group(1)!r} has no #: comment above it"
            assert f"| `{m.group(1)}` |" in table, f"{m.group(1)!r} is not in checks/README.md"
    assert len(found) >= 20, found


def test_log_level_follows_checks_log_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sites log debug lines by default; ``CHECKS_LOG_LEVEL`` sets the logger and file log."""
    from common import logging_config

    def levels() -> tuple[str, str]:
        (conf,) = logging_config()
        (file_log,) = [h for h in conf["handlers"] if h["type"] == "file"]
        return conf["level"], file_log["level"]

    monkeypatch.delenv("CHECKS_LOG_LEVEL", raising=False)
    assert levels() == ("debug", "debug")
    monkeypatch.setenv("CHECKS_LOG_LEVEL", "info")
    assert levels() == ("info", "info")


def test_planes_bandwidth_counts_the_bytes_the_buffers_hold() -> None:
    """algbw and busbw divide the bytes the buffers really hold (nccl-tests: the larger of a
    rank's input and output), not the nominal size naming the row: at 8 B on 3 ranks the
    gathered and scattered buffers hold 3 floats (12 B)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_planes_src", CHECKS / "src" /
                                                  "hvdcore_planes.py")
    assert spec and spec.loader
    planes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(planes)
    for n in (1, 2, 3):
        for nbytes in planes.sizes(1 << 20):
            for op in planes.OPS:
                count, piece = planes.inputs(op, nbytes, n)
                held = max(count, planes.reference(op, 0, n, count, piece).size)
                assert planes.data_bytes(op, nbytes, n) == 4 * held, (op, nbytes, n)
    assert [planes.data_bytes(op, 8, 3) for op in planes.OPS] == [8, 12, 12, 12, 8]
    assert planes.data_bytes("allgather", 1 << 30, 3) == (1 << 30) - 4  # whole floats per rank
    text = (CHECKS / "src" / "hvdcore_planes.py").read_text()
    assert "nbytes / t_" not in text and "moved / t_h" in text  # every figure uses them
