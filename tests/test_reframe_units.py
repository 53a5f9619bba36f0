"""The pure pieces of the checks: scales, capability rules against a real hvdcore report."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from reframe_helpers import CHECKS, ROOT, reframe_env

sys.path.insert(0, str(CHECKS))

from hvdcore_checks.capability_rules import evaluate_report, required_capabilities  # noqa: E402
from hvdcore_checks.discovery import module_frameworks  # noqa: E402
from hvdcore_checks.examples import (  # noqa: E402
    EXAMPLES_DIR,
    MNIST_EXAMPLES,
    RESULT_PATTERN,
    locate_examples,
)
from hvdcore_checks.scales import SCALES, layout  # noqa: E402


def test_layout_of_each_scale() -> None:
    assert layout("1_rank", 4, 1) == (1, 1, 1)
    assert layout("2_ranks", 4, 1) == (2, 2, 1)
    assert layout("1_node", 4, 1) == (4, 4, 1)
    assert layout("2_nodes", 4, 2) == (8, 4, 2)
    # Not offered: more nodes than the partition has, sub-node scale as big as a node.
    assert "needs 4 nodes" in layout("4_nodes", 4, 2)
    assert "repeat 1_node" in layout("2_ranks", 2, 2)
    assert "repeat 1_node" in layout("4_ranks", 4, 2)
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
    assert module_frameworks("hvdcore/0.1.0-foss-2023a-TensorFlow-2.13.0") == {"tensorflow"}
    assert module_frameworks("hvdcore/0.1.0-foss-2023a-CUDA-12.1.1-PyTorch-2.1.2") == {"torch"}
    assert module_frameworks("hvdcore/0.1.0-foss-2023a") == set()
    assert module_frameworks("hvdcore/0.1.0-tensorflow-2.15") == {"tensorflow"}
    assert module_frameworks("hvdcore/0.1.0-PyTorchLightning") == set()  # whole words only


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
    sys.path.insert(0, str(CHECKS / "tools"))
    import report

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
                        "%baseline.hvdcore_module=hvdcore/0.1.0", "local", "default", "find",
                        "pass", num_tasks=2,
                        params=report._params("%baseline.framework=torch "
                                              "%baseline.hvdcore_module=hvdcore/0.1.0"),
                        perfvars=[report.PerfVar("images_per_sec", 10.0)])
    assert list(report.scaling_points([named])) == ["local:default+find torch hvdcore/0.1.0"]
