"""torch.distributed rendezvous across the 2-node localhost Slurm (srun --mpi=pmix): the fake nodes
share one hostname but have different SLURM_NODEID, so they count as two hosts and rank 0 must
choose a non-loopback address and point every rank's Gloo at it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import mpi_env, program

from harness.mpi_init_race import run_job
from harness.slurm_fixtures import FAKE_NODES_ENV, slurm_marks, two_node_cluster  # noqa: F401
from harness.slurm_localhost import SlurmCluster

pytest.importorskip("torch")
pytestmark = slurm_marks(pytest.mark.torch)


@pytest.mark.parametrize("ntasks", [2, 4], ids=["2x1", "2x2"])
def test_gloo_rendezvous_across_two_nodes(cluster: SlurmCluster, ntasks: int) -> None:
    cmd = ["srun", "-N2", f"-n{ntasks}", "--mpi=pmix", "--kill-on-bad-exit=1",
           sys.executable, program("torch_rendezvous.py"), "ok"]
    try:
        res = run_job(cmd, cluster.env(mpi_env(FAKE_NODES_ENV)), 240)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not finish in 240 s\n{exc.stdout!r}\n{exc.stderr!r}")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    n = ntasks
    want = [float(i * n + n * (n - 1) // 2) for i in range(4)]
    assert res.stdout.count(f"OK sum={want}") == n, out
    described = [ln for ln in res.stdout.splitlines() if "rendezvous tcp://" in ln]
    assert len(described) == n, out
    print(described[0])
    for ln in described:
        assert "tcp://127." not in ln, ln
        assert f"(gloo, {n} ranks)" in ln and "ranks on 2 hosts" in ln and "shared by every rank" in ln, ln
        assert "GLOO_SOCKET_IFNAME set by hvdcore" in ln, ln
    assert len({ln.split(": ", 1)[1] for ln in described}) == 1, described  # one plan everywhere


def test_engine_gloo_plane_across_two_nodes(cluster: SlurmCluster) -> None:
    """hvdcore.torch with HVDCORE_CPU_OPERATIONS=gloo on 2 x 2 ranks through srun: the
    engine-driven Gloo plane (fusion, mismatch, process sets, timeline) across the fake nodes,
    with the rendezvous on a non-loopback address."""
    cmd = ["srun", "-N2", "-n4", "--mpi=pmix", "--kill-on-bad-exit=1",
           sys.executable, program("torch_gloo.py"), "engine"]
    env = cluster.env(mpi_env({**FAKE_NODES_ENV, "HVDCORE_CPU_OPERATIONS": "gloo",
                               "HVDCORE_LOG_LEVEL": "info"}))
    try:
        res = run_job(cmd, env, 240)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not finish in 240 s\n{exc.stdout!r}\n{exc.stderr!r}")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert res.stdout.count("torch-gloo engine") == 4 and "size=4" in res.stdout, out[-4000:]
    described = [ln for ln in out.splitlines() if "rendezvous tcp://" in ln]
    assert described and all("tcp://127." not in ln and "ranks on 2 hosts" in ln
                              for ln in described), out[-4000:]


def test_srun_without_mpi_runs_on_the_gloo_controller(cluster: SlurmCluster) -> None:
    """Issue 62: a plain ``srun --mpi=none`` on 2 nodes (no PMI, no MPI in the job): every
    rank takes the Gloo controller from Slurm's variables, meets rank 0's store on the step's
    first node (its NodeAddr, from scontrol) and reduces exactly."""
    cmd = ["srun", "-N2", "-n4", "--mpi=none", "--kill-on-bad-exit=1",
           sys.executable, program("gloo_job.py"), "ok"]
    env = {k: v for k, v in cluster.env(mpi_env()).items()
           if k not in ("HVDCORE_CONTROLLER", "MASTER_ADDR", "MASTER_PORT")}
    try:
        res = run_job(cmd, env, 240)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not finish in 240 s\n{exc.stdout!r}\n{exc.stderr!r}")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    lines = sorted(ln for ln in res.stdout.splitlines() if ln.startswith("gloo-job"))
    assert [ln.split()[1] for ln in lines] == [f"rank={r}" for r in range(4)], out[-4000:]
    assert all("size=4 controller=gloo" in ln and "mpi4py=False OK" in ln for ln in lines), lines
    # the fake nodes share a host name: SLURM_NODEID tells them apart, as under MPI
    assert [ln.split()[4] for ln in lines] == ["local=0/2", "local=1/2"] * 2, lines


def test_uneven_nodes_are_not_homogeneous(cluster: SlurmCluster) -> None:
    """``srun -N2 -n3 --mpi=pmix``: two ranks on n1, one on n2. The MPI controller (its
    shared-memory split) gives Horovod 0.28.1's layout, and is_homogeneous() is False on every
    rank (hvdcore, hvdcore.torch, and hvdcore.tensorflow on rank 0 where TensorFlow is
    installed). The Gloo controller's uneven layout: test_gloo_controller.py."""
    mpi = "pmix"
    cmd = ["srun", "-N2", "-n3", f"--mpi={mpi}", "--kill-on-bad-exit=1",
           sys.executable, program("gloo_job.py"), "layout"]
    env = {k: v for k, v in cluster.env(mpi_env(FAKE_NODES_ENV)).items()
           if k not in ("HVDCORE_CONTROLLER", "MASTER_ADDR", "MASTER_PORT")}
    try:
        res = run_job(cmd, env, 240)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not finish in 240 s\n{exc.stdout!r}\n{exc.stderr!r}")
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
    lines = sorted(ln for ln in res.stdout.splitlines() if ln.startswith("gloo-job"))
    tf = ",False" if importlib.util.find_spec("tensorflow") is not None else ""
    controller = f"controller={'mpi' if mpi == 'pmix' else 'gloo'}"
    assert [ln.split(" ", 4)[4] for ln in lines] == [
        f"local=0/2 cross=0/2 homogeneous=False,False{tf} mpi4py={mpi == 'pmix'} OK",
        f"local=1/2 cross=0/1 homogeneous=False,False mpi4py={mpi == 'pmix'} OK",
        f"local=0/1 cross=1/2 homogeneous=False,False mpi4py={mpi == 'pmix'} OK"], lines
    assert all(ln.startswith(f"gloo-job rank={r} size=3 {controller} ")
               for r, ln in enumerate(lines)), lines


def test_elastic_job_loses_a_node_and_finishes_on_the_other(cluster: SlurmCluster,
                                                            tmp_path: Path) -> None:
    """Issue 58: ``hvdcorerun --min-np 2`` inside ``salloc -N2 -n4`` takes the allocation's
    nodes as its hosts and starts each worker as an ``srun`` step; n2's processes die in epoch
    1 (one by SIGKILL, the other stopped with its node); the job finishes on n1's two workers
    with the weights of an uninterrupted run of the same steps."""
    from harness.elastic_jobs import epochs, finished, run

    plan = {"expect": {"0": 4}, "fail": [{"epoch": 1, "batch": 0, "host": "n2",
                                          "how": "kill", "once": str(tmp_path / "n2")}]}
    proc, out = run(tmp_path, None, plan, "--min-np", "2", env=cluster.env(mpi_env()),
                    prefix=["salloc", "-N2", "-n4", "--quiet"], timeout=300)
    # 12 samples: 2 batches at size 4 (epoch 0); epoch 1's first step is committed by n1's
    # workers (the 8 samples of all four ranks' batches), the 4 left take 1 batch at size 2;
    # epoch 2: 3 batches at size 2
    assert finished(proc, out, 2) == 2 + 2 + 3
    assert {h for _, _, h in epochs(out)[0]} == {"n1", "n2"}
    assert {h for _, _, h in epochs(out)[2]} == {"n1"}
    assert "host n2 is blacklisted for good, its 1 other worker(s) stopped" in out
