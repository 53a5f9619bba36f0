"""Real Open MPI launches on a stand-in remote host: an rsh agent that runs Open MPI's daemon
here with a clean environment, as an ssh login on another node would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.mpi

# skips its own options (-p PORT, -i KEY ...) up to the host, records them, runs the rest
AGENT = """#!/bin/sh
printf '%s\\n' "$*" >> "{log}"
while [ "$1" != remotehost ]; do shift; done
shift
exec env -i PATH="$PATH" HOME="$HOME" sh -c "$*"
"""


def run_on_remote(tmp_path: Path, args: list[str], rank_cmd: str,
                  env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], str]:
    """hvdcorerun ARGS -np 2 -H remotehost:2 sh -c RANK_CMD through the stand-in agent; the
    finished process and the agent's recorded arguments."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not on PATH (apt install openmpi-bin)")
    agent, log = tmp_path / "agent", tmp_path / "agent.log"
    agent.write_text(AGENT.format(log=log))
    agent.chmod(0o755)
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("HVDCORE_", "HOROVOD_", "OMPI_", "PMIX_", "SLURM_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "hvdcore.runner", "-np", "2", "-H", "remotehost:2",
         "--mpi-args", f"--mca plm_rsh_agent {agent}", *args, "sh", "-c", rank_cmd],
        capture_output=True, text=True, env={**base, "PYTHONPATH": str(ROOT), **env},
        cwd=ROOT, timeout=90)
    return proc, log.read_text() if log.exists() else ""


def tagged(line: str) -> list[str]:
    """``line`` from ranks 0 and 1 as hvdcorerun shows them (Open MPI's tags, as horovodrun)."""
    return [f"[1,{rank}]<stdout>:{line}" for rank in (0, 1)]


def test_launcher_environment_reaches_ranks_on_another_host(tmp_path: Path) -> None:
    proc, _ = run_on_remote(tmp_path, [], 'echo "v=${MY_SETTING-unset} '
                            'c=${CUDA_VISIBLE_DEVICES-unset} o=${OLDPWD-unset}"',
                            {"MY_SETTING": "42 x", "CUDA_VISIBLE_DEVICES": "7",
                             "OLDPWD": "/tmp"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == tagged("v=42 x c=unset o=unset"), proc.stderr


def test_ssh_port_and_key_reach_open_mpis_ssh(tmp_path: Path) -> None:
    """-p/-i as horovodrun: Open MPI's rsh agent (ssh) is called with them."""
    proc, agent_args = run_on_remote(tmp_path, ["-p", "2222", "-i", "/keys/id_x"], "echo ok", {})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == tagged("ok"), proc.stdout
    assert agent_args.startswith("-p 2222 -i /keys/id_x remotehost "), agent_args


def test_network_interfaces_reach_the_ranks_under_mpirun(tmp_path: Path) -> None:
    """--network-interfaces under mpirun (was a usage error): the ranks get NCCL_SOCKET_IFNAME
    and Open MPI's TCP interface rule."""
    proc, _ = run_on_remote(tmp_path, ["--network-interfaces", "lo"],
                            'echo "$NCCL_SOCKET_IFNAME $OMPI_MCA_btl_tcp_if_include"', {})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == tagged("lo lo"), proc.stderr
