"""Issues 58 and 62: ``hvdcorerun`` starts ranks on other hosts over ssh (``--gloo`` jobs and
elastic jobs), with Horovod's ``-p``/``-i`` and ``--ssh-args``.

The other host is a network namespace with a real OpenSSH server (tests/harness/netns_host.py):
its address is not this machine's, so the launcher goes through ssh, and what a rank reports of
its network namespace proves where it ran. One namespace serves the whole file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import mpi_env, program

from harness import netns_host
from harness.elastic_jobs import finished
from harness.elastic_jobs import run as elastic_run

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch]
_why = netns_host.missing()
if _why:
    pytestmark.append(pytest.mark.skip(reason=_why))

_PREFIX = re.compile(r"^\[[^\]]+\]<std(?:out|err)>:", re.M)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[netns_host.NetnsHost]:
    with netns_host.netns_host(tmp_path_factory.mktemp("netns")) as h:
        yield h


def _ssh_flags(h: netns_host.NetnsHost) -> list[str]:
    return ["-p", "22", "-i", str(h.key), "--ssh-args", h.ssh_args(),
            "--network-interfaces", h.iface]


def _gloo(h: netns_host.NetnsHost, mode: str, cwd: Path) -> tuple[int, str]:
    hvdcorerun = str(Path(sys.executable).with_name("hvdcorerun"))
    cmd = [hvdcorerun, "--gloo", "-np", "2", "-H", f"localhost:1,{h.addr}:1", *_ssh_flags(h),
           sys.executable, program("ssh_rank.py"), mode]
    env = {k: v for k, v in mpi_env().items() if k != "HVDCORE_CONTROLLER"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=cwd)
    return proc.returncode, _PREFIX.sub("", proc.stdout + proc.stderr)


def test_gloo_job_runs_a_rank_on_the_other_host(host: netns_host.NetnsHost,
                                                tmp_path: Path) -> None:
    code, out = _gloo(host, "ok", tmp_path)
    assert code == 0, out[-4000:]
    lines = {int(m.group(1)): m.group(0)
             for m in re.finditer(r"^SSH rank=(\d+) .* OK$", out, re.M)}
    assert sorted(lines) == [0, 1], out[-4000:]
    # rank 1 ran in the other host's namespace (through sshd), rank 0 here
    assert f"netns={host.inode}" in lines[1], lines
    assert f"netns={os.readlink('/proc/self/ns/net')}" in lines[0], lines
    assert f"host={host.addr}" in lines[1] and "cross=1/2" in lines[1], lines
    assert "cross=0/2" in lines[0] and "local=0" in lines[1], lines
    # the working directory and the environment went along (the venv's PYTHONPATH included)
    assert all(f"cwd={tmp_path}" in ln for ln in lines.values()), lines
    # Horovod's arithmetic: ranks' arange(4) * (rank + 1) summed
    assert all("sum=[0.0, 3.0, 6.0, 9.0]" in ln for ln in lines.values()), lines


def test_a_failed_job_ends_the_rank_on_the_other_host(host: netns_host.NetnsHost,
                                                      tmp_path: Path) -> None:
    """Rank 0 exits 3 while rank 1 (remote, no hvdcore: nothing of its own would end it)
    sleeps: hvdcorerun reports rank 0 and ssh's closed input ends rank 1 there."""
    code, out = _gloo(host, "linger", tmp_path)
    assert code == 3, out[-4000:]
    assert "rank 0 exited with exit code 3" in out, out[-4000:]
    pid = int((tmp_path / "linger.pid").read_text())
    deadline = time.monotonic() + 20
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), f"remote rank {pid} still runs after the job"


def test_elastic_job_replaces_nothing_and_reports_a_remote_failure(
        host: netns_host.NetnsHost, tmp_path: Path) -> None:
    """An elastic job over both hosts: the remote worker raises in epoch 1 (its exit code
    comes back through ssh), its host is blacklisted and the local worker finishes alone."""
    plan = {"expect": {"0": 2},
            "fail": [{"epoch": 1, "batch": 0, "host": host.addr, "how": "raise",
                      "once": str(tmp_path / "failed")}]}
    proc, out = elastic_run(tmp_path, None, plan, "--min-np", "1", "-H",
                            f"localhost:1,{host.addr}:1", *_ssh_flags(host), timeout=180)
    finished(proc, out, 1)
    assert f"planned failure on {host.addr}" in out, out[-4000:]
    assert f"host {host.addr} is blacklisted for good" in out, out[-4000:]
    sizes = re.findall(r"^EPOCH 0 rank \d+ size (\d+) host (\S+)$", out, re.M)
    assert sorted(sizes) == [("2", host.addr), ("2", "localhost")], json.dumps(sizes)
