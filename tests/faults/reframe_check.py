"""Scenario 8, ReFrame part: a ReFrame check whose 2-node Slurm job loses a node, or is
cancelled, reports FAILED promptly with the reason, instead of waiting for the job's time limit.

Each trial runs real ReFrame (``checks/config/slurm.py``, system ``generic:cpu``, scheduler
``squeue``, launcher ``srun --mpi=pmix`` as configured: no ``--kill-on-bad-exit``) on the opt-in
check ``checks/faults/hvdcore_fault_job.py`` (2 nodes x 2 ranks, long enough to outlive the
fault), against the Slurm cluster in ``$SLURM_CONF`` (the 2-node localhost cluster of
``tests/harness/slurm_localhost.py``). Once the ranks have written a checkpoint, it either
SIGKILLs every rank of one node (the job step's processes on that node) or ``scancel``s the job.

A trial is clean when: ReFrame exits non-zero within ``PROMPT_S`` of the fault (the check's time
limit is 10 min); its JSON report has the test case ``fail`` in the ``sanity`` phase (not a
time-out, not a pass) with a reason that names a killed rank / the killed node's tasks, or the
cancelled job; ReFrame's own output shows FAILED and that reason; the job leaves ``squeue``; and
nothing of the job is left running (ReFrame's session, every rank PID the job printed, and every
process whose environment has the job's ``SLURM_JOB_ID``; ``<defunct>`` ignored).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from reframe_helpers import TEST_RUN_ENV, stage_output

from harness.mpi_init_race import mpi_init_crashed

from .jobs import ROOT, Job, Trial, live_processes
from .judge import slurm_job_gone, trial

__all__ = ["CHECK", "PROMPT_S", "reframe_command", "reframe_env", "reframe_node_killed",
           "reframe_scancel", "run_reframe_fault"]

CHECK = ROOT / "checks" / "faults" / "hvdcore_fault_job.py"
CONFIG = ROOT / "checks" / "config" / "slurm.py"
#: ReFrame must have reported the failure this long after the fault (time limit: 600 s).
PROMPT_S = 60.0
#: Steps of the faulted job: far more than run before the fault (0.05 s each).
FAULT_STEPS = 4000


def reframe_env() -> dict[str, str]:
    """Environment of the ReFrame run: this checkout importable, the one-host Slurm settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVDCORE_", "HOROVOD_", "RFM_"))}
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1", OMPI_MCA_btl="self,tcp", CHECKS_SLURM_ONE_HOST="1",
               **TEST_RUN_ENV)
    for var in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NODELIST", "SLURM_NTASKS"):
        env.pop(var, None)
    return env


def reframe_command(workdir: Path, settings: list[str] | None = None) -> list[str]:
    """``reframe`` running the fault check once, prefix and JSON report under ``workdir``."""
    exe = Path(sys.executable).parent / "reframe"
    cmd = [str(exe) if exe.exists() else "reframe", "-C", str(CONFIG), "--system",
           "generic:cpu", "-c", str(CHECK), "-r", "--prefix", str(workdir / "rfm"),
           "--report-file", str(workdir / "report.json")]
    for s in settings or []:
        cmd += ["-S", s]
    return cmd


def _job_output(workdir: Path) -> Path | None:
    found = sorted((workdir / "rfm" / "stage").glob("**/rfm_job.out"))
    return found[0] if found else None


def _wait_running(workdir: Path, job: Job, timeout: float = 180.0
                  ) -> tuple[str, dict[int, str], dict[int, int]]:
    """Wait until every rank printed NODE and READY and a checkpoint was written."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline and job.proc.poll() is None:
        path = _job_output(workdir)
        text = path.read_text(errors="replace") if path else ""
        nodes = {int(r): n for r, n, _ in re.findall(r"^NODE (\d+) (\S+) (\S+)$", text, re.M)}
        pids = {int(r): int(p) for r, p in re.findall(r"^READY (\d+) (\d+)$", text, re.M)}
        ids = set(re.findall(r"^NODE \d+ \S+ (\S+)$", text, re.M))
        if (nodes and len(nodes) == len(pids) == 4 and len(ids) == 1
                and re.search(r"^CKPT ", text, re.M)):
            return ids.pop(), nodes, pids
        time.sleep(0.2)
    raise RuntimeError(f"the check's job never ran 4 ranks with a checkpoint:\n{text[-2000:]}")


def _job_processes(job_id: str) -> dict[int, str]:
    """Live processes whose environment says they belong to Slurm job ``job_id`` of this
    test's cluster (``$SLURM_CONF``): job ids start at 1 in every localhost cluster, and
    another test module's cluster may run its own job of that id at the same time (a CI
    run counted such a job's srun as this trial's leftover)."""
    needle = f"\0SLURM_JOB_ID={job_id}\0".encode()
    conf = os.environ.get("SLURM_CONF")
    cluster = f"\0SLURM_CONF={conf}\0".encode() if conf else b""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = b"\0" + Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in env and cluster in env:
            found[int(entry)] = ""
    return live_processes(set(found), None)


def run_reframe_fault(fault: str, rng: random.Random, workdir: Path) -> Trial:
    """One trial: ``fault`` is ``node-kill`` or ``scancel`` (see the module docstring)."""
    job = Job(reframe_command(workdir, [f"steps={FAULT_STEPS}"]), reframe_env(), cwd=workdir)
    problems: list[str] = []
    try:
        job_id, nodes, pids = _wait_running(workdir, job)
    except RuntimeError as exc:
        job.wait(5)
        job.kill_all()
        result = trial([str(exc)], None, 0, job, fault)
        result.mpi_init_crash = mpi_init_crashed(stage_output(workdir))  # run again if so
        return result
    time.sleep(rng.uniform(0.0, 1.0))
    victims: list[int] = []
    victim_node = ""
    fault_t = time.time()
    if fault == "node-kill":
        victim_node = rng.choice(sorted(set(nodes.values())))
        victims = sorted(r for r, n in nodes.items() if n == victim_node)
        for r in victims:
            try:
                os.kill(pids[r], signal.SIGKILL)
            except ProcessLookupError:
                problems.append(f"rank {r} (pid {pids[r]}) was already gone")
    else:
        res = subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=30)
        if res.returncode != 0:
            problems.append(f"scancel {job_id} failed: {res.stderr.strip()}")
    rc = job.wait(PROMPT_S + 240)
    exit_s = None if job.end is None else job.end - fault_t
    if job.hung:
        problems.append(f"HANG: ReFrame still running {PROMPT_S + 240:.0f} s after the fault")
    elif rc == 0:
        problems.append("ReFrame exited 0 after the fault")
    if exit_s is not None and exit_s > PROMPT_S:
        problems.append(f"ReFrame took {exit_s:.1f} s (> {PROMPT_S:.0f} s) to report")
    case: dict = {}
    try:
        report = json.loads((workdir / "report.json").read_text())
        cases = [tc for run in report["runs"] for tc in run["testcases"]]
        case = cases[0] if len(cases) == 1 else {}
        if len(cases) != 1:
            problems.append(f"{len(cases)} test cases in the report (want 1)")
    except (OSError, ValueError, KeyError) as exc:
        problems.append(f"no readable ReFrame report: {exc}")
    reason = str(case.get("fail_reason") or "")
    if case and (case.get("result"), case.get("fail_phase")) != ("fail", "sanity"):
        problems.append(f"test case ended {case.get('result')!r} in phase "
                        f"{case.get('fail_phase')!r} (want 'fail' in 'sanity'): {reason}")
    if fault == "node-kill":
        named = any(re.search(rf"\brank {r} \(pid \d+ on \S+\) is gone", reason)
                    for r in victims) or f"srun: error: {victim_node}: task" in reason
        if not named:
            problems.append(f"the reason names neither a killed rank {victims} nor node "
                            f"{victim_node}'s tasks: {reason!r}")
    elif not re.search(rf"\*\*\* (JOB {job_id}|STEP {job_id}\.\d+) ON \S+ CANCELLED AT",
                       reason):
        problems.append(f"the reason does not say job {job_id} was cancelled: {reason!r}")
    out = job.output
    if not re.search(r"\bFAILED\b", out) or (reason and reason[:60] not in out):
        problems.append("ReFrame's output does not show FAILED with the reason")
    slurm_job_gone(job_id, problems)
    left = job.leftovers()
    deadline = time.monotonic() + 10
    stray = _job_processes(job_id) | live_processes(set(pids.values()), None)
    while stray and time.monotonic() < deadline:
        time.sleep(0.2)
        stray = _job_processes(job_id) | live_processes(set(pids.values()), None)
    left.update(stray)
    if left:
        problems.append("leftover processes: " + "; ".join(
            f"{pid} {cmd[:120]}" for pid, cmd in sorted(left.items())))
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    note = (f"job {job_id}: killed node {victim_node} ranks {victims}" if victims
            else f"job {job_id}: scancel") + f"; reason: {reason[:200]}"
    return trial(problems, exit_s, len(left), job, note)


def reframe_node_killed(launcher: str, rng: random.Random, workdir: Path) -> Trial:
    """Every rank of one node SIGKILLed while the ReFrame check's job runs: FAILED, promptly,
    naming a killed rank; nothing left running."""
    return run_reframe_fault("node-kill", rng, workdir)


def reframe_scancel(launcher: str, rng: random.Random, workdir: Path) -> Trial:
    """The ReFrame check's running job ``scancel``ed: FAILED, promptly, naming the cancelled
    job; nothing left running."""
    return run_reframe_fault("scancel", rng, workdir)
