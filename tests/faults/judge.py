"""What every scenario judges the same way: the bounds, waiting for a job, naming a dead rank.

A scenario collects ``problems`` (each a broken promise with its evidence) while it watches a
:class:`~faults.jobs.Job`, then turns them into a :class:`~faults.jobs.Trial` with
:func:`trial`.
"""

from __future__ import annotations

import re
import subprocess
import time

from harness.mpi_init_race import mpi_init_crashed

from .jobs import Job, Trial

__all__ = ["EXIT_BOUND_S", "JOB_TIMEOUT_S", "finish", "hvdcore_names_dead", "names_rank",
           "slurm_job_gone", "trial"]

EXIT_BOUND_S = 30.0  # every other rank must be gone this long after a rank died
JOB_TIMEOUT_S = 120.0  # a job still running after this is a hang


def finish(job: Job, trial_problems: list[str], fault_t: float | None,
           timeout: float = JOB_TIMEOUT_S) -> tuple[int | None, float | None, int]:
    """Wait for the job, then measure time since the fault and count leftovers."""
    rc = job.wait(timeout)
    if job.hung:
        trial_problems.append(f"HANG: launcher still running after {timeout:.0f} s (killed)")
    left = job.leftovers()
    if left:
        trial_problems.append("leftover processes: " + "; ".join(
            f"{pid} {cmd[:120]}" for pid, cmd in sorted(left.items())))
        job.kill_all()
    exit_s = None if fault_t is None or job.end is None else job.end - fault_t
    return rc, exit_s, len(left)


def hvdcore_names_dead(output: str, rank: int) -> bool:
    """hvdcore's liveness watchdog logged that ``rank`` died (hvdcore/liveness.py)."""
    return bool(re.search(rf"^\[hvdcore rank \d+\] ERROR rank {rank} \(pid \d+ on \S+\) is "
                          r"gone", output, re.M))


def names_rank(launcher: str, output: str, rank: int) -> bool:
    """The launcher's (or hvdcore's watchdog's) output names ``rank`` as the one that died."""
    if hvdcore_names_dead(output, rank):
        return True
    if launcher == "mpirun":
        return bool(re.search(rf"process rank {rank} with PID|MPI_ABORT was invoked on rank "
                              rf"{rank}\b", output))
    if launcher == "hvdcorerun":
        return bool(re.search(rf"hvdcorerun: job failed: [^\n]*\brank {rank}\b", output))
    return bool(re.search(rf"srun: error: \S+: tasks? [\d,\-]*\b{rank}\b", output))


def trial(problems: list[str], exit_s: float | None, leftovers: int, job: Job,
          note: str) -> Trial:
    """The trial's outcome; a failed one carries the command and the tail of its output."""
    if problems:
        problems.append("command: " + " ".join(job.cmd))
        problems.append("output tail:\n" + job.tail())
    return Trial(not problems, exit_s, leftovers, problems, note,
                 mpi_init_crash=bool(problems) and mpi_init_crashed(job.output))


def _squeue_has(job_id: str) -> bool:
    res = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i %T"], capture_output=True,
                         text=True, timeout=30)
    return res.returncode == 0 and bool(res.stdout.strip())


def slurm_job_gone(job_id: str, problems: list[str], bound: float = EXIT_BOUND_S) -> None:
    """Wait until Slurm job ``job_id`` has left ``squeue``; a problem if it stays ``bound`` s."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if not _squeue_has(job_id):
            return
        time.sleep(0.5)
    problems.append(f"Slurm job {job_id} still in squeue {bound:.0f} s after the job failed")
