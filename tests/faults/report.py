"""Fault-injection report: run every failure scenario repeatedly and print how jobs ended.

Usage, from the repository root (``tests/`` is the import root of the test-side packages, as
in pytest)::

    PYTHONPATH=tests python -m faults.report              # 20 trials per scenario and launcher
    PYTHONPATH=tests python -m faults.report --trials 3 --launchers mpirun
    PYTHONPATH=tests python -m faults.report --json \
        --scenarios dead_rank_ends_job,stall_warns_then_ends_job

Columns: scenario, launcher, trials, clean endings (every promise of the scenario held; see
the scenario functions named in ``faults/catalog.py``), worst time to exit (from the fault to
the launcher's exit, or to the error reaching every rank for errors a job survives; for
fuzzing: the slowest example) and leftovers (processes of a job still alive 5 s after its
launcher ended; zombies ignored).
The fuzzing rows count hypothesis examples instead of trials. Exit status 1 if any trial was
not clean; each failure is printed with its command and output.

Launchers: ``mpirun`` (plain Open MPI mpirun), ``hvdcorerun`` (``python -m hvdcore.runner``),
``srun`` (the Slurm cluster in ``$SLURM_CONF``, else a private 2-node localhost one started for
the run). The ``reframe_*`` rows run ReFrame (``checks/faults/hvdcore_fault_job.py``) on that
cluster: see ``faults/reframe_check.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .catalog import (
    FUZZ_COLLECTIVES,
    FUZZ_KEYS,
    FUZZ_LAUNCHER,
    SCENARIOS,
    Scenario,
    scenario,
    torch_ready,
)
from .jobs import ROOT, Job, Trial, job_env, launch_command, program

__all__ = ["Row", "run_scenario", "run_fuzz_collectives", "run_fuzz_launcher", "format_table",
           "main"]


@dataclass
class Row:
    """One line of the report."""

    scenario: str
    title: str
    launcher: str
    trials: int = 0
    clean: int = 0
    worst_exit_s: float | None = None
    leftovers: int = 0
    wall_s: float = 0.0
    failures: list[str] = field(default_factory=list)
    #: trials run again because a rank died in MPI_Init (harness.mpi_init_race), with why
    startup_retries: list[str] = field(default_factory=list)


def _run_trial(sc: Scenario, launcher: str, seed: str) -> Trial:
    with tempfile.TemporaryDirectory(prefix="hvdcore-faults-") as tmp:
        return sc.run(launcher, random.Random(seed), Path(tmp))


def run_scenario(key: str, launcher: str, trials: int, seed: int = 0,
                 log: bool = False) -> Row:
    """Run ``trials`` trials of scenario ``key`` with ``launcher``."""
    sc = scenario(key)
    row = Row(key, sc.title, launcher)
    t0 = time.monotonic()
    for i in range(trials):
        trial = _run_trial(sc, launcher, f"{seed}-{key}-{launcher}-{i}")
        if trial.mpi_init_crash:  # Open MPI's startup race (harness.mpi_init_race): once more
            row.startup_retries.append(f"trial {i}: {trial.describe()}")
            print(f"  {key} {launcher} trial {i}: a rank died in MPI_Init (Open MPI startup "
                  "race); running the trial again", file=sys.stderr,
                  flush=True)
            trial = _run_trial(sc, launcher, f"{seed}-{key}-{launcher}-{i}")
        row.trials += 1
        row.clean += trial.clean
        row.leftovers += trial.leftovers
        if trial.exit_s is not None:
            row.worst_exit_s = max(row.worst_exit_s or 0.0, trial.exit_s)
        if not trial.clean:
            row.failures.append(f"trial {i}: {trial.describe()}")
        if log:
            print(f"  {key} {launcher} trial {i}: {'clean' if trial.clean else 'NOT CLEAN'} "
                  f"{trial.note}", file=sys.stderr, flush=True)
    row.wall_s = time.monotonic() - t0
    return row


def run_fuzz_collectives(examples: int, launcher: str = "mpirun") -> Row:
    """Hypothesis fuzzing of every core collective in one 2-rank job."""
    row = Row(FUZZ_COLLECTIVES, "fuzz every core collective (2 ranks, lockstep)", launcher)
    env = job_env({"HVDCORE_STALL_CHECK_TIME_SECONDS": "5",
                   "HVDCORE_STALL_SHUTDOWN_TIME_SECONDS": "20"}, launcher)
    t0 = time.monotonic()
    job = Job(launch_command(launcher, 2, [*program("fuzz_collectives"), "--examples",
                                           str(examples), "--hang-s", "30"]), env)
    rc = job.wait(max(300.0, examples * 10.0))
    left = job.leftovers()
    if left:
        job.kill_all()
    row.leftovers = len(left)
    row.wall_s = time.monotonic() - t0
    for _, m in job.matches(r"^FUZZ (\S+) examples=(\d+) ok=\d+ errors=\d+ failures=(\d+) "
                            r"worst_ms=([\d.]+)"):
        row.trials += int(m.group(2))
        row.clean += int(m.group(2)) - int(m.group(3))
        row.worst_exit_s = max(row.worst_exit_s or 0.0, float(m.group(4)) / 1000)
    row.failures += [m.group(0) for _, m in job.matches(r"^FUZZ(FAIL|HANG) .*")]
    total = job.matches(r"^FUZZTOTAL examples=(\d+) failures=(\d+) healthy=(\w+)")
    if job.hung or rc != 0 or not total or total[0][1].group(3) != "True":
        row.failures.append(f"fuzz job ended badly (rc={rc}, hung={job.hung}); command "
                            f"{' '.join(job.cmd)}\n{job.tail(60)}")
    if left:
        row.failures.append(f"leftover processes: {left}")
    return row


def run_fuzz_launcher(examples: int) -> Row:
    """Hypothesis fuzzing of hvdcorerun flags, hostfiles, HVDCORE_* values."""
    from .fuzz_launcher import run_all

    row = Row(FUZZ_LAUNCHER, "fuzz hvdcorerun flags, hostfiles, HVDCORE_* env", "hvdcorerun")
    t0 = time.monotonic()
    for stats in run_all(examples):
        row.trials += stats.examples
        row.clean += stats.examples - len(stats.failures)
        row.worst_exit_s = max(row.worst_exit_s or 0.0, stats.worst_s)
        row.failures += [f"{stats.target}: {f}" for f in stats.failures]
    row.wall_s = time.monotonic() - t0
    return row


def format_table(rows: list[Row]) -> str:
    """The report as a Markdown table."""
    lines = ["| scenario | launcher | trials | clean endings | worst time to exit | leftovers |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        worst = "-" if r.worst_exit_s is None else f"{r.worst_exit_s:.2f} s"
        unit = " examples" if r.scenario in FUZZ_KEYS else ""
        lines.append(f"| {r.scenario} {r.title} | {r.launcher} | {r.trials}{unit} | "
                     f"{r.clean}/{r.trials} | {worst} | {r.leftovers} |")
    return "\n".join(lines)


def _slurm_ready() -> str | None:
    """None if srun can run jobs now, else why not."""
    try:
        res = subprocess.run(["sinfo", "-h", "-o", "%D %t"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo failed: {exc}"
    if res.returncode != 0 or not re.search(r"\bidle\b|\bmix\b", res.stdout):
        return f"no idle Slurm nodes (sinfo: {res.stdout.strip() or res.stderr.strip()})"
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m faults.report",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=20, help="trials per scenario and launcher")
    p.add_argument("--launchers", default="mpirun,hvdcorerun",
                   help="comma list of mpirun, hvdcorerun, srun (default mpirun,hvdcorerun)")
    p.add_argument("--scenarios", default="all",
                   help="comma list of keys: " + ", ".join([s.key for s in SCENARIOS]
                                                           + list(FUZZ_KEYS)))
    p.add_argument("--fuzz-examples", type=int, default=200,
                   help="hypothesis examples per fuzz target (default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the trials' random choices")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--quiet", action="store_true", help="no per-trial progress on stderr")
    a = p.parse_args(argv)
    launchers = [x.strip() for x in a.launchers.split(",") if x.strip()]
    keys = ([s.key for s in SCENARIOS] + list(FUZZ_KEYS) if a.scenarios == "all"
            else [k.strip() for k in a.scenarios.split(",")])
    unknown = set(keys) - {s.key for s in SCENARIOS} - set(FUZZ_KEYS)
    if unknown:
        p.error(f"unknown scenarios {sorted(unknown)}")
    cluster = None
    if "srun" in launchers and not os.environ.get("SLURM_CONF"):
        # no cluster given: start the private 2-node localhost cluster for this run
        from harness.slurm_localhost import SlurmCluster  # tests/harness/

        cluster = SlurmCluster(nodes=2)
        cluster.start()
        os.environ["SLURM_CONF"] = str(cluster.conf)
    if "srun" in launchers:
        why = _slurm_ready()
        if why:
            if cluster is not None:
                cluster.stop()
            p.error(f"--launchers srun: {why}")
    try:
        return _run(a, keys, launchers)
    finally:
        if cluster is not None:
            cluster.stop()


def _run(a: argparse.Namespace, keys: list[str], launchers: list[str]) -> int:
    os.chdir(ROOT)
    rows: list[Row] = []
    skipped: list[str] = []
    for key in keys:
        if key == FUZZ_COLLECTIVES:
            rows.append(run_fuzz_collectives(a.fuzz_examples))
        elif key == FUZZ_LAUNCHER:
            rows.append(run_fuzz_launcher(a.fuzz_examples))
        else:
            sc = scenario(key)
            why = torch_ready() if sc.needs_torch else None
            if why:
                skipped.append(f"{key}: skipped ({why})")
                continue
            for launcher in launchers:
                if launcher in sc.launchers:
                    rows.append(run_scenario(key, launcher, a.trials, a.seed, not a.quiet))
        if not a.quiet and rows:
            r = rows[-1]
            print(f"{r.scenario} {r.launcher}: {r.clean}/{r.trials} clean in {r.wall_s:.0f} s",
                  file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps({"rows": [asdict(r) for r in rows], "skipped": skipped}, indent=2))
    else:
        print(format_table(rows))
        for line in skipped:
            print(f"\n{line}")
        for r in rows:
            for f in r.failures:
                print(f"\nFAILURE {r.scenario} / {r.launcher}: {f}")
            for f in r.startup_retries:
                print(f"\nRUN AGAIN (a rank died in MPI_Init) {r.scenario} / {r.launcher}: {f}")
    return 0 if all(r.clean == r.trials and not r.failures for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
