"""Real hvdcorerun jobs: knobs reach every rank, oversubscription, exit codes, signals."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import untag

from hvdcore.runner.launch import exit_code, failure_summary

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"

pytestmark = pytest.mark.mpi


def launcher_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment minus MPI/hvdcore/Slurm settings: hvdcorerun must add what it needs."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVDCORE_", "HOROVOD_", "OMPI_", "PMIX_", "SLURM_"))}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra or {})
    return env


def hvdcorerun(args: list[str], env: dict[str, str] | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun not found: install openmpi-bin (scripts/setup.sh does)")
    try:
        return subprocess.run([sys.executable, "-m", "hvdcore.runner", *args],
                              capture_output=True, text=True, env=env or launcher_env(),
                              cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hvdcorerun {args} did not finish in {timeout}s: {exc.stdout} {exc.stderr}")


def _alive(pids: list[int]) -> list[int]:
    """The PIDs that are still running (zombies count as gone)."""
    alive = []
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(p)
    return alive


def rank_lines(stdout: str) -> list[dict]:
    rows = [json.loads(line) for line in untag(stdout).splitlines() if line.startswith("{")]
    return sorted(rows, key=lambda r: r["rank"])


@pytest.mark.parametrize("np_", [2, 3], ids=["np2", "np3-oversubscribed"])
def test_every_rank_receives_the_knobs(np_: int) -> None:
    env = launcher_env({"HOROVOD_CYCLE_TIME": "7", "HVDCORE_LOG_LEVEL": "error"})
    proc = hvdcorerun(["-np", str(np_), "--fusion-threshold-mb", "2", "--cycle-time-ms", "0.5",
                       "--no-stall-check", "--", sys.executable,
                       str(PROGRAMS / "runner_env.py")], env=env)
    assert proc.returncode == 0, proc.stderr
    rows = rank_lines(proc.stdout)
    assert [r["rank"] for r in rows] == list(range(np_))
    for r in rows:
        assert r["size"] == np_
        # flags exported as HVDCORE_*; the environment's own variables pass through as well
        assert r["knobs"] == {"HVDCORE_FUSION_THRESHOLD": str(2 * 1024 * 1024),
                              "HVDCORE_CYCLE_TIME": "0.5", "HVDCORE_STALL_CHECK_DISABLE": "1",
                              "HOROVOD_CYCLE_TIME": "7", "HVDCORE_LOG_LEVEL": "error"}


def test_exit_code_of_a_failing_rank_is_propagated() -> None:
    proc = hvdcorerun(["-np", "2", "--verbose", sys.executable,
                       str(PROGRAMS / "runner_env.py"), "1", "3"])
    assert proc.returncode == 3, proc.stderr
    err_lines = proc.stderr.strip().splitlines()
    assert err_lines[0].startswith("hvdcorerun: running: ") and "-np 2" in err_lines[0]
    assert err_lines[-1] == ("hvdcorerun: job failed: rank 1 exited with exit code 3 "
                             "(mpirun exit code 3)")
    # the summary was derived from mpirun's own report, which is passed through unchanged
    assert "Exit code:    3" in proc.stderr


def test_rank_killed_by_signal_is_named() -> None:
    code = "import os, signal; from mpi4py import MPI; MPI.COMM_WORLD.Barrier(); " \
           "MPI.COMM_WORLD.rank == 0 and os.kill(os.getpid(), signal.SIGKILL); " \
           "import time; time.sleep(30)"
    proc = hvdcorerun(["-np", "2", sys.executable, "-c", code], timeout=60)  # the hang guard
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("hvdcorerun: job failed: rank 0 ") and "signal 9" in last, last


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_is_forwarded_and_ranks_stop(sig: signal.Signals) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "hvdcore.runner", "-np", "2", sys.executable,
                             str(PROGRAMS / "runner_sleep.py")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=launcher_env(), cwd=ROOT)
    pids = []
    try:
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:
            line = untag(proc.stdout.readline())  # type: ignore[union-attr]
            if line.startswith("ready"):
                pids.append(int(line.split()[2]))
        assert len(pids) == 2, "ranks did not start"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert f"hvdcorerun: forwarded {sig.name} to mpirun" in err
    # the ranks must go; give them a generous while rather than a fixed 0.5 s (a hang guard)
    deadline = time.monotonic() + 30
    while (alive := _alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive == [], f"ranks still running 30 s after {sig.name}: {alive}"


def test_exception_on_one_hvdcore_rank_is_named() -> None:
    """Through hvdcore's abort-on-exception hook: the job ends and the summary names the rank."""
    proc = hvdcorerun(["-np", "2", sys.executable, str(PROGRAMS / "runner_raise.py")],
                      timeout=90)  # the hang guard
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    # Named wherever it comes in the summary: whether mpirun's MPI_ABORT report reaches stderr
    # before the rank's traceback (and so comes first) depends on scheduling (1 of 10 runs).
    assert last.startswith("hvdcorerun: job failed: "), proc.stderr
    items = last.removeprefix("hvdcorerun: job failed: ").rsplit(" (mpirun", 1)[0].split("; ")
    assert "rank 1 raised ValueError" in items, proc.stderr


def test_closed_stderr_and_chatty_ranks_do_not_block_the_job() -> None:
    """hvdcorerun relays the ranks' stderr; with its own stderr closed it must still drain it."""
    # 'done R' is one write(): print() may write the text and the newline separately (with
    # PYTHONUNBUFFERED set), and then the two ranks' lines can merge in mpirun's output. The
    # barrier: rank 1's exit status 4 makes mpirun kill rank 0, which must have written first.
    code = ("import os, sys; from mpi4py import MPI; r = MPI.COMM_WORLD.rank; "
            "[sys.stderr.write('x' * 99 + chr(10)) for _ in range(20000)]; "
            "os.write(1, f'done {r}\\n'.encode()); MPI.COMM_WORLD.Barrier(); "
            "sys.exit(4 if r == 1 else 0)")
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "hvdcore.runner", "-np", "2",
                                            sys.executable, "-c", code])
    try:
        proc = subprocess.run(["sh", "-c", f"exec 2>&- {cmd}"], capture_output=True, text=True,
                              env=launcher_env(), cwd=ROOT, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("hvdcorerun with a closed stderr blocked (its stderr pipe was not drained)")
    assert proc.returncode == 4
    assert sorted(proc.stdout.split("\n")[:2]) == ["[1,0]<stdout>:done 0",
                                                    "[1,1]<stdout>:done 1"]


def test_failure_summary_patterns_and_exit_code() -> None:
    """Parsers of the reports mpirun (seen above), MPICH and srun print."""
    hydra = ("===================================================================================\n"
             "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
             "=   RANK 2 PID 1234 RUNNING AT node7\n"
             "=   KILLED BY SIGNAL: 9 (Killed)\n")
    assert failure_summary(hydra) == ["rank 2 (node node7): KILLED BY SIGNAL: 9 (Killed)"]
    srun = "srun: error: n1: task 1: Exited with exit code 3\nsrun: error: n2: task 3: Killed\n"
    assert failure_summary(srun) == ["rank 1 (node n1): Exited with exit code 3",
                                     "rank 3 (node n2): Killed"]
    abort = ("MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\n"
             "with errorcode 5.\n")
    assert failure_summary(abort) == ["rank 1 called MPI_Abort with error code 5"]
    assert failure_summary("all fine\n") == []
    assert exit_code(-9) == 137 and exit_code(3) == 3


@pytest.mark.parametrize("controller", ["mpi", "gloo"])
def test_run_gives_each_ranks_value_of_a_function_of_the_script(controller: str) -> None:
    """``horovod.run(train, args=..., np=2)`` as Horovod's examples call it (``--num-proc``).

    Horovod 0.28.1 (horovod/runner/__init__.py ``run``): the values of ``func(*args,
    **kwargs)``, a list indexed by rank; ``np=`` is a deprecated spelling of ``num_proc=`` whose
    DeprecationWarning is not shown under Python's default filters; a failing rank fails the
    call with a RuntimeError. Before hvdcore.run existed: AttributeError on ``horovod.run``.
    """
    args = [sys.executable, str(PROGRAMS / "run_func.py")] + (["gloo"] if controller == "gloo"
                                                              else [])
    try:
        proc = subprocess.run(args, capture_output=True, text=True, env=launcher_env(),
                              cwd=ROOT, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"run_func.py did not finish in 120 s: {exc.stdout} {exc.stderr}")
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(lines[-2]) == [[0, 2, "a", 3], [1, 2, "a", 3]], proc.stdout
    assert lines[-1] == "failed: RuntimeError", proc.stdout + proc.stderr
    assert "rank 1 fails on purpose" in proc.stderr
    assert "DeprecationWarning" not in proc.stderr, proc.stderr
    assert not list(Path(ROOT).glob("hvdcore-run-*")), "the job folder was left behind"
