"""torch.distributed rendezvous across the 2-node localhost Slurm (srun --mpi=pmix): the fake nodes
share one hostname but have different SLURM_NODEID, so they count as two hosts and rank 0 must
choose a non-loopback address and point every rank's Gloo at it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import mpi_env, program

from harness.slurm_localhost import SlurmCluster, missing_requirements

pytest.importorskip("torch")
pytestmark = [pytest.mark.slurm, pytest.mark.mpi, pytest.mark.torch]

_missing = missing_requirements()
if _missing:
    pytestmark.append(pytest.mark.skip(reason="no local Slurm: missing " + ", ".join(_missing)))

# Both fake nodes share this host's name: Open MPI must use TCP between them.
FAKE_NODES_ENV = {"OMPI_MCA_btl": "self,tcp"}


@pytest.fixture(scope="module")
def cluster():  # type: ignore[no-untyped-def]
    """munged + slurmctld + slurmd n1, n2, stopped by PID after the module's tests."""
    with SlurmCluster(nodes=2, cpus_per_node=2) as c:
        yield c


@pytest.mark.parametrize("ntasks", [2, 4], ids=["2x1", "2x2"])
def test_gloo_rendezvous_across_two_nodes(cluster: SlurmCluster, ntasks: int) -> None:
    cmd = ["srun", "-N2", f"-n{ntasks}", "--mpi=pmix", "--kill-on-bad-exit=1",
           sys.executable, program("torch_rendezvous.py"), "ok"]
    try:
        res = subprocess.run(cmd, env=cluster.env(mpi_env(FAKE_NODES_ENV)), capture_output=True,
                             text=True, timeout=240)
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
