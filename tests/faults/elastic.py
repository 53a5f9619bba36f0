"""Fault scenarios of elastic jobs (issue 58): every injected fault ends in recovery or in a
clear error within its bound, and leaves no process behind.

Both run ``tests/programs/elastic_torch.py`` under ``hvdcorerun``'s elastic flags with one
loopback "host" per worker (see :mod:`harness.elastic_jobs`); the launcher argument is ignored
(elastic jobs have one launcher).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from .jobs import ROOT, Job, Trial, job_env
from .judge import finish, trial

__all__ = ["elastic_fault_recovers", "elastic_below_min_np_ends_clearly"]

PROGRAM = ROOT / "tests" / "programs" / "elastic_torch.py"
RECOVERY_BOUND_S = 180.0  # the whole job, fault included (3 epochs of 12 samples)


def _job(workdir: Path, n: int, min_np: int, plan: dict, extra: dict[str, str]) -> Job:
    hosts = ",".join(f"127.0.0.{k + 1}:1" for k in range(n))
    plan = {"epochs": 3, "samples": 12, "batch": 2, **plan}
    env = job_env({"ELASTIC_PLAN": json.dumps(plan), **extra}, "hvdcorerun")
    cmd = [sys.executable, "-m", "hvdcore.runner", "--min-np", str(min_np), "-H", hosts,
           sys.executable, str(PROGRAM)]
    return Job(cmd, env, cwd=workdir)


def elastic_fault_recovers(launcher: str, rng: random.Random, workdir: Path) -> Trial:
    """3 workers, ``--min-np 2``: one (not rank 0's host) fails at a random step of epoch 0-1,
    by SIGKILL, ``os._exit(3)`` or an exception. The job must finish (exit 0) within
    180 s, the two survivors must end with the same weights after the same steps, and nothing
    may be left running."""
    how = rng.choice(("kill", "exit", "raise"))
    epoch, batch = rng.randrange(2), rng.randrange(2)
    host = rng.choice(("127.0.0.2", "127.0.0.3"))
    fail = [{"epoch": epoch, "batch": batch, "host": host, "how": how,
             "once": str(workdir / "failed")}]
    job = _job(workdir, 3, 2, {"expect": {"0": 3}, "fail": fail}, {})
    problems: list[str] = []
    rc, _, left = finish(job, problems, None, timeout=RECOVERY_BOUND_S)
    out = job.output
    done = [ln.split(" w ")[1] for ln in out.splitlines() if "DONE rank" in ln]
    if rc != 0:
        problems.append(f"the job exited {rc}: the fault was not recovered from")
    elif len(done) != 2 or len(set(done)) != 1:
        problems.append(f"expected 2 survivors with equal weights, got {done}")
    exit_s = None if job.end is None else job.end - job.start
    return trial(problems, exit_s, left, job, f"{how} on {host} at epoch {epoch} batch {batch}")


def elastic_below_min_np_ends_clearly(launcher: str, rng: random.Random,
                                      workdir: Path) -> Trial:
    """2 workers, ``--min-np 2``, ``HVDCORE_ELASTIC_TIMEOUT=3``: one is SIGKILLed. The
    launcher must exit non-zero within 3 + 30 s of the death, naming the count and the timeout,
    the survivor must raise the same reason, and nothing may be left running."""
    fail = [{"epoch": 1, "batch": rng.randrange(2), "host": "127.0.0.2", "how": "kill",
             "once": str(workdir / "killed")}]
    job = _job(workdir, 2, 2, {"fail": fail}, {"HVDCORE_ELASTIC_TIMEOUT": "3"})
    problems: list[str] = []
    rc, _, left = finish(job, problems, None)
    out = job.output
    reason = "only 1 worker(s), fewer than --min-np 2, after --elastic-timeout 3 s"
    killed = [t for t, _, ln in job.lines if "was killed by signal 9" in ln]
    if rc in (0, None):
        problems.append(f"the launcher exited {rc}, expected an error")
    if f"job failed: {reason}" not in out:
        problems.append("the launcher did not name the count and the timeout")
    if f"RendezvousError: {reason}" not in out:
        problems.append("the survivor did not raise the launcher's reason")
    exit_s = None if not killed or job.end is None else job.end - killed[0]
    if exit_s is not None and exit_s > 33:
        problems.append(f"the job ended {exit_s:.1f} s after the death (bound 33 s)")
    return trial(problems, exit_s, left, job, "below --min-np")
