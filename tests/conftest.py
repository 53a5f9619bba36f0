"""Shared helpers: launch real MPI jobs as subprocesses with a timeout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = Path(__file__).resolve().parent / "programs"


def mpi_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for an mpirun child: root allowed, oversubscription, this checkout importable.

    PYTHONUNBUFFERED is deliberately not set: unbuffered, print() writes the text and the newline
    separately and two ranks' lines can merge in mpirun's output; buffered, a flushed print() is
    one write (stderr stays line-buffered).
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVDCORE_", "HOROVOD_")) and k != "PYTHONUNBUFFERED"}
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        OMPI_MCA_btl_vader_single_copy_mechanism="none",
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    if extra:
        env.update(extra)
    return env


def run_mpi(
    np: int,
    args: list[str],
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``mpirun -np N python <args>``; fail the test (not hang) after ``timeout`` seconds."""
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun not found: install openmpi-bin (scripts/setup.sh does)")
    cmd = ["mpirun", "-np", str(np), "--oversubscribe", sys.executable, *args]
    try:
        return subprocess.run(
            cmd, env=mpi_env(env), capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout
        err = (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else exc.stderr
        pytest.fail(f"mpirun -np {np} {args} did not finish in {timeout}s\n{out}\n{err}")


_RANK_PREFIX = re.compile(r"^\[(?:1,)?\d+\]<(?:stdout|stderr)>:", re.M)


def untag(text: str) -> str:
    """``text`` without the rank tags ``hvdcorerun`` puts before each line by default (Open
    MPI's ``[1,R]<stdout>:``, the Gloo launcher's ``[R]<stdout>:``)."""
    return _RANK_PREFIX.sub("", text)


def run_gloo(np: int, args: list[str], env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``hvdcorerun --gloo -np N python <args>`` (the Gloo controller, no MPI in the job);
    the ranks' ``[r]<stdout>:`` prefixes are removed, so output reads as under ``mpirun``."""
    hvdcorerun = str(Path(sys.executable).with_name("hvdcorerun"))
    cmd = [hvdcorerun, "--gloo", "-np", str(np), sys.executable, *args]
    full = {k: v for k, v in mpi_env(env).items() if k != "HVDCORE_CONTROLLER"}
    try:
        res = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=timeout,
                             cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout
        err = (exc.stderr or b"").decode() if isinstance(exc.stderr, bytes) else exc.stderr
        pytest.fail(f"hvdcorerun --gloo -np {np} {args} did not finish in {timeout}s\n{out}\n{err}")
    res.stdout = untag(res.stdout)
    res.stderr = untag(res.stderr)
    return res


def launch(controller: str, np: int, args: list[str], env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``args`` at ``np`` ranks on ``controller``: ``mpirun`` for "mpi", ``hvdcorerun --gloo``
    for "gloo"."""
    return (run_mpi if controller == "mpi" else run_gloo)(np, args, env=env, timeout=timeout)


def ok_lines(proc: subprocess.CompletedProcess[str], np: int, marker: str) -> list[str]:
    """The ``marker`` lines of a launch that exited 0 with one OK line from each rank 0..np-1
    (programs print ``<marker> rank=R ... OK``)."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{marker} at np={np} failed (rc {proc.returncode}):\n{out[-6000:]}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(marker)]
    ranks = sorted(int(m.group(1)) if (m := re.search(r"rank=(\d+)", ln)) else -1
                   for ln in lines)
    assert ranks == list(range(np)), f"expected one {marker} line from every rank:\n{out[-4000:]}"
    assert all(ln.endswith("OK") for ln in lines), lines
    return lines


def program(name: str) -> str:
    """Path of a test program under tests/programs."""
    return str(PROGRAMS / name)


@pytest.fixture(params=[1, 2, 3], ids=lambda n: f"np{n}")
def world_size(request: pytest.FixtureRequest) -> int:
    """World sizes every multi-rank test runs at."""
    return request.param


#: Program groups that share one launch (tests/programs/several.py): importing TensorFlow and
#: Keras costs ~8 s per rank here and torch ~2-4 s, more than most of these programs' checks.
#: Tests in different files judge their own program's lines in the same launch.
SHARED_LAUNCHES = {
    "tf": ("tensorflow_collectives.py", "tensorflow_semantics.py", "tensorflow_model_parallel.py",
           "tensorflow_parity.py", "tensorflow_v1_training.py", "tensorflow_one_rank_errors.py"),
    "keras": ("tensorflow_keras_fit.py", "tensorflow_keras_semantics.py",
              "tensorflow_api_parity.py", "tensorflow_sync_bn.py"),
    "torch": ("torch_collectives.py", "torch_optimizer.py", "torch_errors.py",
              "torch_semantics.py:all", "torch_mpi_plane.py", "torch_horovod_rules.py"),
    # the Gloo launches of test_torch_gloo.py: the first three only (semantics on Gloo and the
    # CUDA-aware MPI plane are tests of their own there / MPI only)
    "torch_gloo": ("torch_collectives.py", "torch_optimizer.py", "torch_errors.py"),
    # test_tensorflow_dlpack.py at 2 ranks on the Gloo plane (what its tests there judge)
    "tf_collectives_keras_fit": ("tensorflow_collectives.py", "tensorflow_keras_fit.py"),
}

#: Groups asked for under mpirun with no extra environment that run in the same launch: the
#: "tf" and "keras" (Keras 3 or the bundled Keras 2) programs, so each world size pays
#: TensorFlow's import once for both (~10 s CPU per rank here). tf_keras (TF_USE_LEGACY_KERAS=1)
#: must be set before TensorFlow's import: its "keras" launch stays a launch of its own.
JOINED_LAUNCHES = {"tf": ("tf", "keras"), "keras": ("tf", "keras")}


@pytest.fixture(scope="session")
def shared_launch(tmp_path_factory: pytest.TempPathFactory):
    """``(group, np, env, controller=) -> CompletedProcess``: the programs of
    ``SHARED_LAUNCHES[group]`` run in one launch (``mpirun -np N``, or ``hvdcorerun --gloo``
    for controller "gloo"), once per session for each group, np, env and controller
    (``JOINED_LAUNCHES``: groups that share one launch)."""
    runs: dict[tuple, subprocess.CompletedProcess[str]] = {}

    def get(group: str, np: int, env: dict[str, str] | None = None,
            timeout: float = 550, controller: str = "mpi") -> subprocess.CompletedProcess[str]:
        groups = (JOINED_LAUNCHES.get(group, (group,)) if not env and controller == "mpi"
                  else (group,))
        key = (groups, np, tuple(sorted((env or {}).items())), controller)
        if key not in runs:
            work = tmp_path_factory.mktemp(f"{'-'.join(groups)}-np{np}")
            programs = [name for g in groups for name in SHARED_LAUNCHES[g]]
            # joined groups keep the time each launch had alone
            runs[key] = launch(controller, np, [program("several.py"), str(work), *programs],
                               env=env, timeout=timeout * len(groups))
        return runs[key]
    return get


# --- running on several pytest-xdist workers (scripts/test.sh: -n 2 --dist loadscope) -------

#: Test files that must share a worker: files whose tests share launches (``shared_launch``
#: caches per worker) or that start a localhost Slurm cluster (one at a time keeps the 4 ranks
#: of a 2 x 2 job on the 2 cores they were sized for). Every other file is a group of its own,
#: so module-scoped fixtures (one ReFrame run, one Slurm cluster) run once.
XDIST_GROUPS = {
    "test_tensorflow": "tf", "test_tensorflow_semantics": "tf", "test_tensorflow_dlpack": "tf",
    "test_reframe_slurm": "slurm", "test_faults_slurm": "slurm", "test_faults_reframe": "slurm",
    "test_core_hierarchical_slurm": "slurm", "test_torch_rendezvous_slurm": "slurm",
    "test_mpi_mismatch_slurm": "slurm",
    "test_steady_path": "steady", "test_steady_batch": "steady",  # tests/steady_runs.py
    "test_torch_binding": "torch", "test_torch_semantics": "torch",  # SHARED_LAUNCHES["torch"]
    "test_torch_dataplanes": "torch",
}

#: Rough seconds per group on the 2-core CI machine (junit of a serial run): the longest
#: groups are handed out first so that no worker starts a long one at the end. Only the order
#: depends on these figures; a group not named here counts as short.
GROUP_SECONDS = {
    # (test_reframe_local: its setup time in the log of a 2-worker CI run; tf, torch,
    # test_tf_matrix and test_keras_backends from 2-worker runs of their files alone (s68);
    # the others from a serial run)
    "tf": 400, "test_keras_backends": 220, "slurm": 330, "test_tf_matrix": 240,
    "test_reframe_local": 250,  # s70: 165 s setup without the TF MNIST variant (was 650)
    "test_docs_journeys": 90, "test_docs": 60,
    "test_container_rootfs": 180, "test_reframe_degraded": 150, "test_reframe_modules": 150,
    "test_reframe_configs": 140, "test_torch_gloo": 140, "test_synthetic_benchmark": 125,
    "test_faults_scenarios": 120, "test_easyconfigs": 105, "test_easybuild_install": 100,
    "torch": 230, "test_core_hierarchical": 80,
    # elastic jobs (issue 58): 10 torch jobs, 3 TF jobs (the launcher-only scenarios run with
    # torch only), serially
    "test_elastic_torch": 370, "test_elastic_tensorflow": 250, "test_elastic_units": 60,
    "test_elastic_keras_backends": 110,
    "test_ssh_hosts": 50,  # 3 jobs over ssh to a network namespace (s71)
    "test_round_mesh": 40,  # 6 jobs of 1-4 processes, each imports torch (s72)
}


def xdist_group(nodeid: str) -> str:
    """The worker group of a test: its file's ``XDIST_GROUPS`` entry, else the file itself."""
    stem = Path(nodeid.split("::", 1)[0]).stem
    return XDIST_GROUPS.get(stem, stem)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker: the longest groups first (every worker sorts alike, so the
    collections still agree). A run without xdist keeps pytest's order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # sorted() is stable: within a group the collection order stays
        items[:] = sorted(items, key=lambda it: -GROUP_SECONDS.get(xdist_group(it.nodeid), 0))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """``--dist loadscope`` with ``xdist_group`` as the scope: one worker runs a whole group,
    in the order the workers collected (longest first), not by test count."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)
