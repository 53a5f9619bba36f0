"""Issue 62: the Gloo controller's launches and faults (hvdcorerun --gloo, torchrun, bad input).

The collectives and bindings on this controller are checked against their references by
test_core_collectives (every core collective, 1-3 ranks) and test_torch_gloo (the torch
programs with thread progress, 1-3 ranks); this file checks how jobs start and fail.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, mpi_env, ok_lines, program, run_gloo

from hvdcore.controllers import choose, launched_by
from hvdcore.controllers.gloo_env import expand_hostlist, read
from hvdcore.netaddr import local_interfaces
from hvdcore.ports import handoff_port
from hvdcore.runner.gloo_launch import plan
from hvdcore.runner.hosts import Host

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch]


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in mpi_env(extra).items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_", "HOROVOD_", "MASTER_"))
           and k not in ("RANK", "WORLD_SIZE", "HVDCORE_CONTROLLER")}
    env.update(extra or {})
    return env


# -- the rule and the launch variables (in-process) -------------------------------------------

def test_the_controller_rule_follows_the_launcher() -> None:
    assert launched_by({"OMPI_COMM_WORLD_SIZE": "2"}) == "mpi"
    assert launched_by({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "PMIX_RANK": "0"}) == "mpi"
    assert launched_by({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}) == "slurm"
    assert launched_by({"TORCHELASTIC_RUN_ID": "x"}) == "gloo"
    assert launched_by({}) is None
    assert choose("gloo", "HOROVOD_CONTROLLER", {"OMPI_COMM_WORLD_SIZE": "2"}) == (
        "gloo", "HOROVOD_CONTROLLER=gloo")
    assert choose("auto", "default", {"OMPI_COMM_WORLD_SIZE": "2"})[0] == "mpi"
    assert choose("auto", "default", {"SLURM_PROCID": "0", "SLURM_NTASKS": "2"})[0] == "gloo"
    assert choose("auto", "default", {"RANK": "0", "WORLD_SIZE": "2",
                                      "MASTER_ADDR": "h"})[0] == "gloo"


def test_launch_variables_of_each_launcher() -> None:
    hv = read({"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "5000",
               "HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1",
               "HOROVOD_LOCAL_SIZE": "2", "HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2"})
    assert (hv.rank, hv.size, hv.addr, hv.port, hv.store_here) == (3, 4, "10.0.0.1", 5000, False)
    tr = read({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "29500",
               "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "j",
               "TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert (tr.rank, tr.store_here, tr.launcher) == (0, False, "torchrun")
    sl = read({"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_NODELIST": "n[07-08]",
               "SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0"})
    assert (sl.rank, sl.size, sl.addr, sl.store_here) == (1, 4, "n07", False)
    assert sl.port == 20000 + 12 * 64
    assert expand_hostlist("gpu[1-2,10],login") == ["gpu1", "gpu2", "gpu10", "login"]
    assert [(p.rank, p.host, p.local_rank, p.cross_rank, p.cross_size)
            for p in plan([Host("a", 2), Host("b", 1)], 3)] == [
        (0, "a", 0, 0, 2), (1, "a", 1, 0, 1), (2, "b", 0, 1, 2)]


# -- launches ---------------------------------------------------------------------------------

def test_hvdcorerun_gloo_runs_without_mpi_and_reports_the_layout() -> None:
    """Two hosts that name this machine (as Horovod's elastic tests use them) start locally,
    one with 2 slots and one with 1; each rank's local and cross rank and size are Horovod
    0.28.1's for that layout (runner/common/util/hosts.py ``get_host_assignments``: a rank's
    cross group is the hosts that have its local rank) and ``is_homogeneous()`` is False on
    every rank, from hvdcore and hvdcore.torch (and hvdcore.tensorflow on rank 0 where
    TensorFlow is installed; Horovod's controllers: homogeneous when the allgathered local
    sizes are all equal); no rank imports mpi4py."""
    hvdcorerun = str(Path(sys.executable).with_name("hvdcorerun"))
    res = subprocess.run([hvdcorerun, "--gloo", "-np", "3", "-H", "localhost:2,127.0.0.1:1",
                          sys.executable, program("gloo_job.py"), "layout"],
                         env=_clean_env(), capture_output=True, text=True, timeout=180, cwd=ROOT)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr[-4000:]
    with_tf = importlib.util.find_spec("tensorflow") is not None
    # rank: (local rank/size, cross rank/size, is_homogeneous of hvdcore, torch[, tensorflow])
    want = {0: ("0/2", "0/2", "False,False,False" if with_tf else "False,False"),
            1: ("1/2", "0/1", "False,False"), 2: ("0/1", "1/2", "False,False")}
    for r, (local, cross, homogeneous) in want.items():
        assert f"[{r}]<stdout>:gloo-job rank={r} size=3 controller=gloo local={local} " \
               f"cross={cross} homogeneous={homogeneous} mpi4py=False OK" in out, out
        # CPU tensors take this controller's Gloo host plane: hvd.cpu_operations() says so
        assert f"[{r}]<stdout>:cpu-path rank={r} gloo (default on the Gloo controller: " \
               "its host plane, no MPI in this job)" in out, out


def test_network_interfaces_takes_horovods_comma_list() -> None:
    """--network-interfaces lo,eth0: the rendezvous on the first, GLOO_SOCKET_IFNAME the list
    (was an OSError traceback)."""
    hvdcorerun = str(Path(sys.executable).with_name("hvdcorerun"))
    names = ",".join(["lo", *(i.name for i in local_interfaces() if i.name != "lo")][:2])
    res = subprocess.run([hvdcorerun, "--gloo", "-np", "2", "--network-interfaces", names,
                          sys.executable, "-c", "import os; print('ifname', "
                          "os.environ['GLOO_SOCKET_IFNAME'], "
                          "os.environ['HOROVOD_GLOO_RENDEZVOUS_ADDR'])"],
                         env=_clean_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = sorted(ln for ln in res.stdout.splitlines() if "ifname" in ln)
    assert lines == [f"[{r}]<stdout>:ifname {names} 127.0.0.1" for r in (0, 1)], res.stdout


def test_torchrun_runs_a_horovod_script_unchanged() -> None:
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    port = handoff_port()  # for torchrun's store
    res = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-port", str(port),
                          program("gloo_job.py"), "ok"], env=_clean_env(),
                         capture_output=True, text=True, timeout=180, cwd=ROOT)
    lines = ok_lines(res, 2, "gloo-job")
    assert all("controller=gloo" in ln and "mpi4py=False" in ln for ln in lines), lines
    assert all("local=" in ln and "/2 cross=0/1 homogeneous=True " in ln for ln in lines), lines


def test_a_dead_rank_ends_the_job_with_its_exit_code() -> None:
    t0 = time.monotonic()
    res = run_gloo(3, [program("gloo_job.py"), "die"], timeout=150)
    assert res.returncode == 7, res.stdout + res.stderr
    assert "rank 1 exited with exit code 7" in res.stderr, res.stderr
    assert time.monotonic() - t0 < 120


def test_an_unreachable_rendezvous_fails_within_the_timeout_naming_it() -> None:
    env = _clean_env({"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
                      "HOROVOD_GLOO_RENDEZVOUS_PORT": "9", "HOROVOD_RANK": "1",
                      "HOROVOD_SIZE": "2", "HOROVOD_GLOO_TIMEOUT_SECONDS": "3"})
    res = subprocess.run([sys.executable, program("gloo_job.py"), "ok"], env=env,
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode != 0
    err = res.stderr
    assert "RendezvousError" in err and "127.0.0.1:9" in err, err
    assert "HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT" in err and "HVDCORE_RENDEZVOUS_TIMEOUT" in err, err


def test_ranks_started_for_different_sizes_fail_clearly(tmp_path: Path) -> None:
    """Rank 0 hosts the store for 2 ranks, rank 1 was told 3: both fail naming the sizes."""
    port = handoff_port()
    base = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "HVDCORE_RENDEZVOUS_TIMEOUT": "20"}
    procs = [subprocess.Popen([sys.executable, program("gloo_job.py"), "ok"],
                              env=_clean_env({**base, "RANK": str(r), "WORLD_SIZE": size}),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
             for r, size in ((0, "2"), (1, "3"))]
    outs = [p.communicate(timeout=90) for p in procs]
    assert all(p.returncode != 0 for p in procs), outs
    assert "started for 3 ranks, rank 0 for 2" in outs[1][1], outs[1][1]
    assert "rank 1 was started for 3 ranks" in outs[0][1], outs[0][1]


def test_a_rank_0_that_never_checks_in_is_named_within_the_timeout() -> None:
    """Rank 1 alone at a live store (hosted here, as hvdcorerun --gloo hosts it): after the
    timeout it names rank 0 as missing; it does not wait out the store's own timeout a
    second time and end in torch's bare DistStoreError."""
    import datetime

    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, 2, True, datetime.timedelta(seconds=60),
                     wait_for_workers=False)
    env = _clean_env({"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
                      "HOROVOD_GLOO_RENDEZVOUS_PORT": str(store.port), "HOROVOD_RANK": "1",
                      "HOROVOD_SIZE": "2", "HOROVOD_GLOO_TIMEOUT_SECONDS": "3"})
    res = subprocess.run([sys.executable, program("gloo_job.py"), "ok"], env=env,
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    err = res.stderr
    assert res.returncode != 0, err
    assert re.search(r"RendezvousError: rank 1: ranks \[0\] of 2 did not reach the rendezvous "
                     rf"store at 127\.0\.0\.1:{store.port} within 3 s", err), err
    assert "DistStoreError" not in err, err
