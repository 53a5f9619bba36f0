"""The fabric check: its parser (checks/hvdcore_checks/fabric.py) on transport log excerpts of
each kind (tests/data/fabric/, written after the public formats its README names), and the
check itself through ReFrame on localhost: MPI's shared memory and Gloo's loopback interface
found and passing; a declared MPI transport or NCCL network the job does not have failing with
what was found."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from reframe_helpers import CHECKS, CONFIGS, reframe_env, run_reframe

from hvdcore_checks.fabric import judge, parse, unjudged  # noqa: E402

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


def test_hpcx_ibext_plugin_is_infiniband() -> None:
    """Recorded (NVIDIA/nccl#1357): the HPC-X plugin's ``IBext`` network and SHARP NICs."""
    f = _log("nccl_ibext_sharp_nccl1357.log")
    assert f.nccl_net == "IB" and f.nics == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5"]
    assert judge(f, {"nccl_net": "IB", "nics_per_node": 4}) == []
    (wrong,) = judge(f, {"nccl_net": "IB", "nics_per_node": 2})
    assert "uses 4 NIC(s)" in wrong and "[0]mlx5_0:1/IB/SHARP" in wrong
    assert judge(parse("h:1:1 [0] NCCL INFO Using network IBext_v8"), {"nccl_net": "IB"}) == []


def test_ofi_provider_without_a_nic_count_is_not_judged_as_zero() -> None:
    f = _log("rccl_ofi_cxi_no_count.log")
    declared = {"nccl_net": "AWS Libfabric", "nics_per_node": 4}
    assert f.nccl_net == "AWS Libfabric" and f.nics == [] and judge(f, declared) == []
    (note,) = unjudged(f, declared)
    assert note.startswith("nics_per_node=4 not judged") and "Selected Provider is cxi" in note
    # no line names any NIC of a network that prints them: not proven, a failure
    (wrong,) = judge(parse("h:1:1 [0] NCCL INFO Using network IB"), {"nics_per_node": 4})
    assert "no line in the output names NCCL/RCCL's NICs" in wrong
    (wrong,) = judge(parse(""), {"nics_per_node": 4})
    assert "no NCCL/RCCL network line" in wrong


@pytest.mark.parametrize("prefix", ["", "{rank}: ", " {rank}: ", "[1,{rank}]<stdout>:",
                                    "[1,{rank}]<stderr>: "])
def test_gpus_per_node_behind_launcher_prefixes(prefix: str) -> None:
    """Recorded RCCL lines (ROCm/rccl#419, 4 GPUs) as srun --label / mpirun --tag-output
    print them: the GPUs are counted; a wrong declaration fails."""
    lines = (DATA / "rccl_ib_rccl419.log").read_text().splitlines()
    f = parse("\n".join(prefix.format(rank=i % 4) + ln for i, ln in enumerate(lines)))
    assert f.gpus_per_node == 4 and f.nccl_net == "IB" and len(f.nics) == 4
    assert judge(f, {"nccl_net": "IB", "gpus_per_node": 4, "nics_per_node": 4}) == []
    (wrong,) = judge(f, {"gpus_per_node": 8})
    assert "NCCL used 4 GPUs on a node, the partition declares gpus_per_node=8" in wrong


@pytest.mark.parametrize("each_sees_one", [False, True])
def test_gpus_per_node_are_counted_by_bus_id(each_sees_one: bool) -> None:
    """Recorded init lines of 2 nodes (NVIDIA/nccl-tests#252): 4 GPUs on kolyoz2, 2 on kolyoz1
    in the excerpt; counted by PCI bus id, so ranks that each see only their own GPU (every
    line "[0]", CUDA_VISIBLE_DEVICES per rank) count the same."""
    text = (DATA / "nccl_ib_two_nodes_nccltests252.log").read_text()
    if each_sees_one:
        text = re.sub(r" \[\d\] NCCL INFO", " [0] NCCL INFO", text)
    f = parse(text)
    assert f.gpus_per_node == 4
    assert judge(f, {"gpus_per_node": 4}) == []
    (wrong,) = judge(f, {"gpus_per_node": 8})
    assert "NCCL used 4 GPUs on a node" in wrong


def test_declared_gpus_that_no_line_proves_fail() -> None:
    """No NCCL line names a host's GPUs (a host-staging fallback, a CPU-only job): a declared
    gpus_per_node is not proven, a failure; the CPU partitions' 0 declares nothing."""
    local = _log("ompi_vader_gloo_lo.log")
    (wrong,) = judge(local, {"gpus_per_node": 4})
    assert "declares gpus_per_node=4, but no NCCL/RCCL line names a host" in wrong
    assert judge(local, {"gpus_per_node": 0}) == []


def test_mtl_under_pml_cm_is_an_mpi_transport() -> None:
    f = _log("ompi_cm_mtl_ofi.log")
    assert (f.mpi_pml, f.mpi_mtl) == ("cm", "ofi") and set(f.mpi_transports) == {"cm", "ofi"}
    assert judge(f, {"mpi_transport": "ofi"}) == []
    assert judge(_log("ompi_ucx.log"), {"mpi_transport": "ucx"}) == []


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


