"""The pure pieces of the checks: scales, capability rules against a real hvdcore report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from reframe_helpers import CHECKS, ROOT, reframe_env

sys.path.insert(0, str(CHECKS))

from hvdcore_checks.capability_rules import evaluate_report, required_capabilities  # noqa: E402
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
