"""Scenario 8 through ``srun`` on the 2-node localhost Slurm: a node's ranks die, a job is cancelled.

Needs a running cluster (``SLURM_CONF``; :mod:`harness.slurm_localhost` starts one). Each
function runs ONE trial and judges it, as in :mod:`faults.scenarios`.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

from .jobs import Job, Trial, job_env, launch_command, program
from .judge import EXIT_BOUND_S, finish, hvdcore_names_dead, names_rank, slurm_job_gone, trial

__all__ = ["slurm_node_killed", "slurm_scancel"]


def _slurm_start(rng: random.Random, workdir: Path, launcher_ends_job: bool = True
                 ) -> tuple[Job, int, dict[int, str], str]:
    np_ = rng.choice((2, 4))
    args = [*program("train"), "--ckpt-dir", str(workdir), "--steps", "100000",
            "--ckpt-every", "5", "--step-sleep", "0.03"]
    job = Job(launch_command("srun", np_, args, nodes=2, launcher_ends_job=launcher_ends_job),
              job_env(launcher="srun"))
    job.wait_for(r"^NODE ", count=np_, timeout=90)
    nodes = {int(m.group(1)): m.group(2) for _, m in job.matches(r"^NODE (\d+) (\S+) (\S+)$")}
    ids = {m.group(3) for _, m in job.matches(r"^NODE (\d+) (\S+) (\S+)$")}
    return job, np_, nodes, (ids.pop() if len(ids) == 1 else "")


def slurm_node_killed(launcher: str, rng: random.Random, workdir: Path,
                      launcher_ends_job: bool = True) -> Trial:
    """All ranks of one node of the 2-node localhost cluster are SIGKILLed mid-job: srun fails
    (non-zero) naming the tasks, the ranks on the surviving node exit, the Slurm job leaves the
    queue and no process is left. ``launcher_ends_job=False``: srun without
    ``--kill-on-bad-exit`` (Slurm's default), so hvdcore's watchdog must end the survivors and
    name a dead rank."""
    job, np_, nodes, job_id = _slurm_start(rng, workdir, launcher_ends_job)
    problems: list[str] = []
    if len(set(nodes.values())) != 2 or not job_id:
        problems.append(f"ranks did not span 2 nodes of one job: {nodes} job {job_id!r}")
        job.kill_all()
        return trial(problems, None, 0, job, "setup")
    victim_node = rng.choice(sorted(set(nodes.values())))
    victims = [r for r, n in nodes.items() if n == victim_node]
    job.wait_for(r"^CKPT ", timeout=60)
    time.sleep(rng.uniform(0, 0.5))
    pids = job.rank_pids()
    fault_t = time.time()
    for r in victims:
        try:
            os.kill(pids[r], signal.SIGKILL)
        except (KeyError, ProcessLookupError):
            problems.append(f"rank {r} had no live pid to kill")
    exit_s, left = _srun_ended(job, problems, fault_t, "after a node's ranks were killed")
    if not any(names_rank("srun", job.output, r) for r in victims):
        problems.append(f"srun's output names none of the killed tasks {victims}")
    if not launcher_ends_job and not any(hvdcore_names_dead(job.output, r) for r in victims):
        problems.append(f"no hvdcore watchdog line names a killed rank {victims}")
    slurm_job_gone(job_id, problems)
    return trial(problems, exit_s, left, job, f"np={np_} killed node {victim_node} "
                                              f"ranks {victims}"
                 + ("" if launcher_ends_job else " (no --kill-on-bad-exit)"))


def _srun_ended(job: Job, problems: list[str], fault_t: float,
                what: str) -> tuple[float | None, int]:
    """Wait for srun after a fault; it must fail, within the bound. Returns (time to exit,
    leftover processes)."""
    rc, _, left = finish(job, problems, None)
    exit_s = None if job.end is None else job.end - fault_t
    if rc == 0:
        problems.append(f"srun exited 0 {what}")
    if exit_s is not None and exit_s > EXIT_BOUND_S:
        problems.append(f"job took {exit_s:.1f} s to end {what}")
    return exit_s, left


def slurm_scancel(launcher: str, rng: random.Random, workdir: Path) -> Trial:
    """``scancel`` of a running 2-node job: srun ends non-zero, every rank exits, the job
    leaves the queue, nothing is left running."""
    job, np_, nodes, job_id = _slurm_start(rng, workdir)
    problems: list[str] = []
    if not job_id:
        problems.append(f"no job id from the ranks: {nodes}")
        job.kill_all()
        return trial(problems, None, 0, job, "setup")
    job.wait_for(r"^CKPT ", timeout=60)
    fault_t = time.time()
    res = subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        problems.append(f"scancel {job_id} failed: {res.stderr.strip()}")
    exit_s, left = _srun_ended(job, problems, fault_t, "after scancel")
    slurm_job_gone(job_id, problems)
    return trial(problems, exit_s, left, job, f"np={np_} job {job_id}")
