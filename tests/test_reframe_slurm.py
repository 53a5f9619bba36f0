"""The suite through a real 2-node Slurm on localhost, and the example job scripts via sbatch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reframe_helpers import (
    CHECKS,
    CONFIGS,
    MNIST_EXAMPLE,
    ONE_CHUNK_MNIST,
    QUICK_TORCH_MNIST,
    ROOT,
    UNGUARDED_EFFICIENCY,
    reframe_env,
    run_reframe,
    stage_output,
)

from harness import slurm_fixtures
from harness.mpi_init_race import again_on_crash, run_job
from harness.slurm_localhost import SlurmCluster, missing_requirements

pytestmark = [pytest.mark.slurm, pytest.mark.reframe, pytest.mark.mpi]

_missing = missing_requirements()
if _missing:
    pytestmark.append(pytest.mark.skip(reason="no local Slurm: missing " + ", ".join(_missing)))

needs_example = pytest.mark.skipif(
    not MNIST_EXAMPLE.exists(), reason="examples/pytorch_mnist.py (the PyTorch example) is missing"
)

# Both fake nodes share this host's name: Open MPI uses TCP on loopback between them (and the
# configuration knows it is one host: CHECKS_SLURM_ONE_HOST)
FAKE_NODES_ENV = {**slurm_fixtures.FAKE_NODES_ENV, "CHECKS_SLURM_ONE_HOST": "1"}


@pytest.fixture(scope="module")
def cluster():
    """munged + slurmctld + slurmd n1, n2, stopped by PID after the module's tests."""
    with SlurmCluster(nodes=2, cpus_per_node=2) as c:
        yield c


def _pids_alive(pids: list[int]) -> list[int]:
    return [p for p in pids if SlurmCluster._alive(p)]


def test_harness_two_nodes_srun_pmix(cluster: SlurmCluster) -> None:
    env = cluster.env(reframe_env(FAKE_NODES_ENV))
    res = run_job(["srun", "-N2", "-n4", "--mpi=pmix", sys.executable,
                   str(ROOT / "tests" / "programs" / "mpi_nodes.py")], env, 120)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [line for line in res.stdout.splitlines() if line.strip()]
    assert len(lines) == 4, res.stdout
    assert {line.split()[2] for line in lines} == {"n1", "n2"}
    assert all(line.split()[1] == "4" and line.split()[3] == "6" for line in lines)


@pytest.mark.slow
@pytest.mark.torch
@needs_example
def test_suite_through_slurm_1_node_and_2_nodes(cluster: SlurmCluster, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    env = cluster.env(reframe_env(FAKE_NODES_ENV))
    t0 = time.monotonic()
    # The TensorFlow MNIST variant runs in the local suite; here torch keeps the leg short.
    # The synthetic benchmark (ResNet-50) has its own quick run in test_synthetic_benchmark.py.
    # One hvdcore launch and one DDP peer launch per scale (ONE_CHUNK_MNIST): 12 instead of 36
    # rank starts; the alternating chunks are the local suite's (test_reframe_local.py).
    args = ["-C", str(CONFIGS / "slurm.py"), "--system", "generic:cpu", "-c", str(CHECKS),
            "-x", "HvdcoreMnistCheck.*framework=tensorflow", "-x", "HvdcoreSyntheticCheck",
            "-x", "HvdcoreDataPlanesCheck", "-x", "HvdcoreFabricCheck", "-r",
            *UNGUARDED_EFFICIENCY, *QUICK_TORCH_MNIST, *ONE_CHUNK_MNIST,
            "--report-file", str(report)]
    def run() -> subprocess.CompletedProcess[str]:
        shutil.rmtree(tmp_path / "rfm", ignore_errors=True)
        return run_reframe(args, tmp_path, env, timeout=900)

    res = again_on_crash(run, lambda r: None if r.returncode == 0 else stage_output(tmp_path),
                         "the suite through Slurm")
    seconds = time.monotonic() - t0
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    data = json.loads(report.read_text())
    cases = {tc["display_name"]: tc for run in data["runs"] for tc in run["testcases"]}
    assert all(tc["result"] == "pass" for tc in cases.values()), out[-4000:]
    # Fake nodes share 2 cores: every figure is reported, none judged (the config says so).
    for name, tc in cases.items():
        for key, (value, _ref, lower, upper, *_rest) in (tc["perfvalues"] or {}).items():
            assert value is not None and (lower, upper) == (None, None), (name, key)
    assert all(tc["scheduler"] == "squeue" for tc in cases.values())
    by_scale = {n.split("%scale=")[1].split()[0]: tc for n, tc in cases.items()
                if "%scale=" in n}
    assert len(by_scale) == len([n for n in cases if "%scale=" in n])  # torch only
    assert set(by_scale) == {"1_node", "2_nodes"}
    assert by_scale["1_node"]["num_tasks"] == 2 and by_scale["2_nodes"]["num_tasks"] == 4
    assert set(by_scale["2_nodes"]["job_nodelist"]) == {"n1", "n2"}
    assert "ddp_ratio" in " ".join(by_scale["2_nodes"]["perfvalues"])  # the DDP peer ran
    print(f"the Slurm leg took {seconds:.0f} s")


SCRIPTS = ["alvis_jobsubmit.sh", "perlmutter_sbatch.sh", "lumi_sbatch.sh"]


@pytest.mark.torch
@needs_example
@pytest.mark.parametrize("script", SCRIPTS)
def test_example_job_script_submits_and_trains(cluster: SlurmCluster, script: str,
                                               tmp_path: Path) -> None:
    """The user-guide job scripts, unchanged, with CPU-only resources given on the command line
    (command-line options override #SBATCH lines): partition, no GPUs, 2 ranks per node."""
    out_file = tmp_path / "job.out"
    env = cluster.env(reframe_env({**FAKE_NODES_ENV, "VENV_DIR": sys.prefix, "STEPS": "20"}))
    args = ["--partition=debug", "--gpus-per-node=0", "--constraint=", "--ntasks-per-node=2",
            "--cpus-per-task=1", f"--output={out_file}", str(ROOT / "examples" / "slurm" / script)]
    jobid, state, code = again_on_crash(
        lambda: cluster.run_batch(args, env=env, cwd=ROOT, timeout=600),
        lambda job: None if job[1:] == ("COMPLETED", 0) or not out_file.exists()
        else out_file.read_text(), script)
    log = out_file.read_text() if out_file.exists() else ""
    assert (state, code) == ("COMPLETED", 0), f"job {jobid}: {state} {code}\n{log[-4000:]}"
    assert "All required capabilities present: mpi, torch" in log, log[-4000:]
    assert "hvdcore-mnist: ranks=4 " in log, log[-4000:]


def test_harness_stops_every_daemon_also_on_failure(tmp_path: Path) -> None:
    c = SlurmCluster(nodes=1, workdir=tmp_path / "slurm")
    with pytest.raises(RuntimeError, match="boom"), c:
        pids = dict(c._pids)
        assert set(pids) == {"munged", "slurmctld", "slurmd-n1"}
        assert _pids_alive(list(pids.values())) == list(pids.values())
        raise RuntimeError("boom")
    assert _pids_alive(list(pids.values())) == []
    assert not (tmp_path / "slurm" / "harness.json").exists()


def test_harness_cli_run_and_stop(tmp_path: Path) -> None:
    tool = ROOT / "tests" / "harness" / "slurm_localhost.py"
    work = tmp_path / "cli"
    res = subprocess.run([sys.executable, str(tool), "run", "--nodes", "2", "--workdir",
                          str(work), "--", "sinfo", "-h", "-N", "-o", "%N %t"],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "n1 idle" in res.stdout and "n2 idle" in res.stdout
    # `run` stopped the daemons: no state file left behind, the failed command's code returned.
    assert not (work / "harness.json").exists()
    res = subprocess.run([sys.executable, str(tool), "run", "--nodes", "1", "--workdir",
                          str(work), "--", "false"], capture_output=True, text=True, timeout=180)
    assert res.returncode == 1
