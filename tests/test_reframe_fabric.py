"""The fabric check: its parser (checks/hvdcore_checks/fabric.py) on transport log excerpts of
each kind (tests/data/fabric/, written after the public formats its README names), and the
check itself through ReFrame on localhost: MPI's shared memory and Gloo's loopback interface
found and passing; a declared MPI transport or NCCL network the job does not have failing with
what was found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reframe_helpers import CHECKS, CONFIGS, reframe_env, run_reframe

from hvdcore_checks.fabric import judge, parse  # noqa: E402

DATA = Path(__file__).parent / "data" / "fabric"


def _log(name: str):
    return parse((DATA / name).read_text())


def test_infiniband_with_gpudirect() -> None:
    f = _log("nccl_ib_gdr.log")
    assert (f.nccl_net, f.nics, f.gdr) == ("IB", ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], True)
    assert f.gpus_per_node == 4 and {"P2P/IPC", "NET/IB/0/GDRDMA"} <= set(f.paths)
    assert judge(f, {"nccl_net": "IB", "gpus_per_node": 4, "nics_per_node": 4}) == []
    (wrong,) = judge(f, {"nccl_net": "IB", "gpus_per_node": 4, "nics_per_node": 2})
    assert "uses 4 NIC(s)" in wrong and "NET/IB : Using [0]mlx5_0:1/IB" in wrong


def test_socket_fallback_fails_quoting_the_line() -> None:
    f = _log("nccl_socket_fallback.log")
    assert (f.nccl_net, f.nics) == ("Socket", ["hsn0", "hsn1"])
    problems = judge(f, {"nccl_net": "AWS Libfabric", "nics_per_node": 2})
    assert problems[0].startswith("NCCL/RCCL fell back to TCP sockets (expected nccl_net "
                                  "'AWS Libfabric'): nid001234:77012:77012 [0] NCCL INFO "
                                  "Using network Socket"), problems
    assert judge(f, {"nccl_net": "Socket"}) == []


def test_aws_ofi_plugin_on_cxi() -> None:
    f = _log("nccl_ofi_cxi.log")
    assert f.nccl_net == "AWS Libfabric" and len(f.nics) == 4 and f.gdr
    assert "NVLS" not in f.paths  # "not available" is not NVLS in use
    assert judge(f, {"nccl_net": "OFI", "nics_per_node": 4}) == []
    (wrong,) = judge(f, {"nccl_net": "IB"})
    assert "took 'AWS Libfabric', expected nccl_net 'IB'" in wrong


def test_rccl_within_one_node_over_shared_memory() -> None:
    f = _log("rccl_shm_single_node.log")
    assert f.paths.keys() == {"SHM/direct/direct"} and f.nccl_net == "Socket"


def test_mpi_transports_and_gloo_interface() -> None:
    ucx = _log("ompi_ucx.log")
    assert ucx.mpi_pml == "ucx" and judge(ucx, {"mpi_transport": "ucx"}) == []
    local = _log("ompi_vader_gloo_lo.log")
    assert set(local.mpi_transports) == {"ob1", "sm", "self"} and local.gloo_interface == "lo"
    assert judge(local, {"mpi_transport": "sm", "gloo_interface": "lo"}) == []
    (wrong,) = judge(local, {"mpi_transport": "ucx"})
    assert "expected MPI transport 'ucx'" in wrong and "Using vader btl" in wrong


@pytest.mark.reframe
@pytest.mark.mpi
@pytest.mark.torch
def test_fabric_check_on_localhost(tmp_path: Path) -> None:
    """Passes with the local config's declarations (sm, lo); with a partition declaring UCX
    and an NCCL network it does not have, fails quoting what it found. One ReFrame session."""
    report = tmp_path / "report.json"
    (tmp_path / "good").mkdir()
    (tmp_path / "bad").mkdir()
    res = run_reframe(["-C", str(CONFIGS / "local.py"), "-c", str(CHECKS / "hvdcore_fabric.py"),
                       "-r", "--report-file", str(report)], tmp_path / "good", reframe_env(),
                      timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert "mpi=['ob1', 'self', 'sm'] gloo_interface=lo" in res.stdout
    bad = run_reframe(["-C", str(CONFIGS / "local.py"), "-c", str(CHECKS / "hvdcore_fabric.py"),
                       "-r", "-S", "expect_mpi_transport=ucx", "-S", "expect_nccl_net=IB",
                       "--report-file", str(tmp_path / "bad.json")], tmp_path / "bad",
                      reframe_env(), timeout=300)
    assert bad.returncode != 0
    (case,) = [tc for run in json.loads((tmp_path / "bad.json").read_text())["runs"]
               for tc in run["testcases"]]
    reason = case["fail_reason"]
    assert case["fail_phase"] == "sanity" and "fabric mismatch" in reason, reason
    assert "expected nccl_net 'IB': no NCCL/RCCL network line" in reason, reason
    assert "expected MPI transport 'ucx'; the output shows" in reason, reason
    assert "Using vader btl" in reason or "Using sm btl" in reason, reason


