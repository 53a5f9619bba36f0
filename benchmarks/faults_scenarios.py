"""The fault scenarios of issue 8: each function runs ONE trial and judges it.

Every scenario takes ``(launcher, rng, workdir)`` and returns a :class:`Trial`. A trial is
clean only if every promise of the scenario held (see each docstring); ``problems`` lists each
broken promise with the evidence. ``exit_s`` is the time from the fault to the end of the job
(the launcher's exit), or to the error reaching every rank for errors the job survives.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from faults_harness import Job, Trial, job_env, launch_command, program

sys.path.insert(0, str(Path(program("faults_checkpoint.py")).parent))
import faults_checkpoint as ckpt  # noqa: E402
import faults_train  # noqa: E402

__all__ = ["Scenario", "SCENARIOS", "EXIT_BOUND_S", "torch_ready"]

EXIT_BOUND_S = 30.0  # every other rank must be gone this long after a rank died
JOB_TIMEOUT_S = 120.0  # a job still running after this is a hang


@dataclass(frozen=True)
class Scenario:
    """One row family of the report."""

    key: str
    title: str
    launchers: tuple[str, ...]
    run: Callable[[str, random.Random, Path], Trial]
    needs_torch: bool = False


def _finish(job: Job, trial_problems: list[str], fault_t: float | None,
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


def _train(framework: str) -> str:
    """The training program: NumPy core API, or PyTorch + hvdcore.torch.DistributedOptimizer."""
    return program("faults_train_torch.py" if framework == "torch" else "faults_train.py")


def torch_ready() -> str | None:
    """None when the torch variants can run, else why not."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed"
    if importlib.util.find_spec("hvdcore.torch") is None:
        return "hvdcore.torch is not in this checkout"
    return None


def _hvdcore_names_dead(output: str, rank: int) -> bool:
    """hvdcore's liveness watchdog logged that ``rank`` died (hvdcore/liveness.py)."""
    return bool(re.search(rf"^\[hvdcore rank \d+\] ERROR rank {rank} \(pid \d+ on \S+\) is "
                          r"gone", output, re.M))


def _names_rank(launcher: str, output: str, rank: int) -> bool:
    if _hvdcore_names_dead(output, rank):
        return True
    if launcher == "mpirun":
        return bool(re.search(rf"process rank {rank} with PID|MPI_ABORT was invoked on rank "
                              rf"{rank}\b", output))
    if launcher == "hvdcorerun":
        return bool(re.search(rf"hvdcorerun: job failed: [^\n]*\brank {rank}\b", output))
    return bool(re.search(rf"srun: error: \S+: tasks? [\d,\-]*\b{rank}\b", output))


def _trial(problems: list[str], exit_s: float | None, leftovers: int, job: Job,
           note: str) -> Trial:
    if problems:
        problems.append("command: " + " ".join(job.cmd))
        problems.append("output tail:\n" + job.tail())
    return Trial(not problems, exit_s, leftovers, problems, note)


# -- 1: SIGKILL of one rank ------------------------------------------------------------------

def kill_one_rank(launcher: str, rng: random.Random, workdir: Path,
                  framework: str = "numpy", launcher_ends_job: bool = True) -> Trial:
    """One rank is SIGKILLed during backward, inside the gradient allreduce, during the
    checkpoint write, or from outside at a random moment. Every other rank must be gone
    within 30 s with a non-zero job exit, the launcher must name the dead rank, no rank may
    finish training and no process may be left.

    ``launcher_ends_job=False`` (``mpirun --enable-recovery``, ``srun`` without
    ``--kill-on-bad-exit``): the launcher leaves the other ranks running, so hvdcore's liveness
    watchdog must end them, and its own message must name the dead rank (mpirun then
    exits 0 after MPI_Abort, so only srun's exit status is judged)."""
    np_ = rng.choice((2, 2, 3))
    kind = rng.choice(("kill-backward", "kill-collective", "kill-checkpoint", "kill-external"))
    steps, every = 40, 4
    if kind == "kill-external":
        # the kill comes at most ~3 s after READY; the sleeps alone make training last 12 s,
        # so it cannot finish first however the job is scheduled
        steps = 400
    victim = 0 if kind == "kill-checkpoint" else rng.randrange(np_)
    step = rng.choice(range(every, steps - every, every)) if kind == "kill-checkpoint" \
        else rng.randrange(2, steps - 2)
    args = [_train(framework), "--ckpt-dir", str(workdir), "--steps", str(steps),
            "--ckpt-every", str(every), "--step-sleep", "0.03"]
    if kind != "kill-external":
        args += ["--fault", kind, "--fault-rank", str(victim), "--fault-step", str(step),
                 "--fault-delay", f"{rng.uniform(0, 0.004):.4f}"]
    job = Job(launch_command(launcher, np_, args, launcher_ends_job=launcher_ends_job),
              job_env(launcher=launcher))
    problems: list[str] = []
    fault_t = None
    if kind == "kill-external":
        job.wait_for(r"^READY ", count=np_, timeout=90)
        time.sleep(rng.uniform(0.1, 1.0) + (2.0 if framework == "torch" else 0.0))
        pid = job.rank_pids().get(victim)
        if pid is None:
            problems.append(f"rank {victim} never printed READY")
        else:
            fault_t = time.time()
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                problems.append(f"rank {victim} (pid {pid}) was already gone")
    rc, _, left = _finish(job, problems, None)
    if kind != "kill-external":
        hits = job.matches(r"^FAULT (\d+) \S+ (\d+) ([\d.]+)$")
        if not hits:
            problems.append("the fault never fired (no FAULT line)")
        else:
            fault_t = float(hits[0][1].group(3))
    exit_s = None if fault_t is None or job.end is None else job.end - fault_t
    if rc == 0 and (launcher_ends_job or launcher != "mpirun"):
        problems.append("launcher exited 0 after a rank was killed")
    if exit_s is not None and exit_s > EXIT_BOUND_S:
        problems.append(f"job took {exit_s:.1f} s (> {EXIT_BOUND_S:.0f} s) to end")
    if launcher_ends_job and not _names_rank(launcher, job.output, victim):
        problems.append(f"{launcher}'s output does not name the dead rank {victim}")
    if not launcher_ends_job and not _hvdcore_names_dead(job.output, victim):
        problems.append(f"no hvdcore watchdog line names the dead rank {victim}")
    done = job.matches(r"^DONE (\d+)")
    if done:
        problems.append(f"ranks {[int(m.group(1)) for _, m in done]} finished training")
    return _trial(problems, exit_s, left, job,
                  f"{framework} np={np_} {kind} rank={victim} "
                  f"step={step if kind != 'kill-external' else '-'}"
                  + ("" if launcher_ends_job else " (launcher keeps the job)"))


# -- 2: exception in user code ---------------------------------------------------------------

def user_exception(launcher: str, rng: random.Random, workdir: Path,
                   framework: str = "numpy") -> Trial:
    """One rank raises ValueError in user code: the job ends at once (non-zero), that rank's
    traceback appears exactly once, every line of it labelled with the rank."""
    np_ = rng.choice((2, 3))
    victim, step = rng.randrange(np_), rng.randrange(1, 12)
    args = [_train(framework), "--ckpt-dir", str(workdir), "--steps", "15",
            "--fault", "exception", "--fault-rank", str(victim), "--fault-step", str(step)]
    job = Job(launch_command(launcher, np_, args), job_env(launcher=launcher))
    problems: list[str] = []
    rc, _, left = _finish(job, problems, None)
    hits = job.matches(r"^FAULT (\d+) exception (\d+) ([\d.]+)$")
    fault_t = float(hits[0][1].group(3)) if hits else None
    exit_s = None if fault_t is None or job.end is None else job.end - fault_t
    out = job.output
    if rc == 0:
        problems.append("launcher exited 0 after an uncaught exception")
    if exit_s is None or exit_s > EXIT_BOUND_S:
        problems.append(f"job did not end promptly after the exception (exit_s={exit_s})")
    headline = f"uncaught ValueError on rank {victim} of {np_}"
    if out.count(headline) != 1:
        problems.append(f"'{headline}' appears {out.count(headline)} times (want 1)")
    if out.count("Traceback (most recent call last)") != 1:
        problems.append(f"{out.count('Traceback (most recent call last)')} tracebacks "
                        "printed (want exactly 1)")
    label = f"[hvdcore rank {victim}] "
    for needle in ("Traceback (most recent call last)",
                   f"ValueError: injected failure in user code at step {step}"):
        lines = [ln for ln in out.splitlines() if needle in ln]
        if not lines or not all(ln.startswith(label) for ln in lines):
            problems.append(f"traceback line {needle!r} not labelled {label.strip()!r}: {lines}")
    if job.matches(r"^DONE "):
        problems.append("some rank finished training")
    return _trial(problems, exit_s, left, job, f"{framework} np={np_} rank={victim} step={step}")


# -- 3: mismatches ---------------------------------------------------------------------------

_MISMATCH_SIDES = {
    # kind: (value the odd rank submits, value the others submit)
    "shape": ("[10, 4]", "[10, 3]"),
    "dtype": ("'float64'", "'float32'"),
    "op": ("MAX", "SUM"),
    "root": ("submitted 1", "submitted 0"),
    "name": ("'mm/name_odd'", "'mm/name_even'"),
}


def mismatches(launcher: str, rng: random.Random, workdir: Path) -> Trial:
    """Every mismatch kind (name, shape, dtype, op, broadcast root, process set membership) in
    one job, odd rank chosen at random: each rank gets an HvdcoreError whose message shows
    both sides' values and ranks; the job stays healthy after each (name last: it is a stall
    and ends the job at the shutdown bound)."""
    np_ = rng.choice((2, 3))
    odd = rng.randrange(np_)
    kinds = ["shape", "dtype", "op", "root", "process_set"]
    rng.shuffle(kinds)
    kinds.append("name")
    env = job_env({"HVDCORE_STALL_CHECK_TIME_SECONDS": "1",
                   "HVDCORE_STALL_SHUTDOWN_TIME_SECONDS": "3"}, launcher)
    job = Job(launch_command(launcher, np_, [program("faults_mismatch.py"), ",".join(kinds),
                                             str(odd)]), env)
    problems: list[str] = []
    rc, _, left = _finish(job, problems, None)
    others = [r for r in range(np_) if r != odd]
    others_txt = f"rank {others[0]}" if len(others) == 1 else f"ranks {others}"
    worst = 0.0
    for kind in kinds:
        starts = [float(m.group(1)) for _, m in job.matches(rf"^KIND \d+ {kind} ([\d.]+)$")]
        caught = {int(m.group(1)): m for _, m in
                  job.matches(rf"^CAUGHT (\d+) {kind} ([\d.]+) (\w+): (.*)$")}
        missing = [r for r in range(np_) if r not in caught]
        if missing:
            problems.append(f"{kind}: no error on ranks {missing}")
        if starts and caught:
            worst = max(worst, max(float(m.group(2)) for m in caught.values()) - min(starts))
        if kind == "process_set":
            ps = list(range(np_))
            want = (f"rank {odd} submitted [{np_ - 1}]", f"submitted {ps}")
        else:
            odd_v, even_v = _MISMATCH_SIDES[kind]
            want = (odd_v, even_v)
        for r, m in caught.items():
            msg = m.group(4)
            if not all(w in msg for w in want):
                problems.append(f"{kind}: rank {r}'s message lacks {want}: {msg[:300]}")
            if kind != "name" and (f"rank {odd} submitted" not in msg
                                   or f"{others_txt} submitted" not in msg):
                problems.append(f"{kind}: rank {r}'s message does not name both sides' ranks")
            want_type = "StallError" if kind == "name" else "MismatchError"
            if m.group(3) != want_type:
                problems.append(f"{kind}: rank {r} got {m.group(3)}, want {want_type}")
        if kind != "name" and len(job.matches(rf"^HEALTHY \d+ {kind} {np_}$")) != np_:
            problems.append(f"{kind}: the job was not healthy afterwards on every rank")
    if rc == 0:
        problems.append("the name mismatch (a stall) did not end the job non-zero")
    return _trial(problems, worst, left, job, f"np={np_} odd rank={odd} order={kinds}")


# -- 4: stall --------------------------------------------------------------------------------

def stall(launcher: str, rng: random.Random, workdir: Path) -> Trial:
    """One rank never submits a tensor: every rank warns, not before the check time, naming
    the tensor and the missing rank, and the job ends (non-zero, StallError), not before the
    shutdown bound and within EXIT_BOUND_S after it.

    Only bounds that hold under any scheduling are judged: no rank submits the tensor before
    its STALL line, so the coordinator's clock for it starts after the earliest STALL line.
    How soon after the check time the warning came is not judged (``exit_s`` is reported)."""
    np_ = rng.choice((2, 3))
    lazy = rng.randrange(np_)
    tensor = f"stall/t{rng.randrange(1000)}"
    check, shutdown = 1.0, 4.0
    env = job_env({"HVDCORE_STALL_CHECK_TIME_SECONDS": f"{check:g}",
                   "HVDCORE_STALL_SHUTDOWN_TIME_SECONDS": f"{shutdown:g}"}, launcher)
    job = Job(launch_command(launcher, np_, [program("faults_stall.py"), str(lazy), tensor]),
              env)
    problems: list[str] = []
    rc, _, left = _finish(job, problems, None)
    starts = [float(m.group(1)) for _, m in job.matches(r"^STALL \d+ ([\d.]+)$")]
    t0 = max(starts) if starts else None
    exit_s = None if t0 is None or job.end is None else job.end - t0
    # time since the earliest STALL line (0.5 s of slack for clock granularity)
    since = None if not starts or job.end is None else job.end - min(starts)
    warns = job.matches(r"^\[hvdcore rank (\d+)\] WARNING stalled collectives")
    warned = {int(m.group(1)) for _, m in warns}
    if warned != set(range(np_)):
        problems.append(f"stall warning on ranks {sorted(warned)}, want all {np_}")
    if warns and starts:
        first = min(t for t, _ in warns) - min(starts)
        if first < check - 0.5:
            problems.append(f"first warning {first:.1f} s after the stall (check time {check})")
    if not job.matches(rf"allreduce '{re.escape(tensor)}': submitted by .* still missing on "
                       rf"rank {lazy}$"):
        problems.append(f"no warning line names tensor {tensor} and missing rank {lazy}")
    if not job.matches(rf"This rank \({lazy}\) has not submitted: {re.escape(tensor)}"):
        problems.append(f"rank {lazy} was not told which tensor it has not submitted")
    if "StallError" not in job.output:
        problems.append("no StallError")
    if rc == 0:
        problems.append("launcher exited 0 after a stall shutdown")
    if since is None or since < shutdown - 0.5 or since > shutdown + EXIT_BOUND_S:
        problems.append(f"job ended {since} s after the stall (shutdown bound {shutdown} s)")
    if job.matches(r"^(WOKE|NOSTALL|DONE) "):
        problems.append("a rank went on past the stall")
    return _trial(problems, exit_s, left, job, f"np={np_} lazy rank={lazy}")


# -- 5: SIGINT / SIGTERM to the launcher -----------------------------------------------------

def _signal_launcher(signum: int) -> Callable[[str, random.Random, Path], Trial]:
    def run(launcher: str, rng: random.Random, workdir: Path) -> Trial:
        np_ = rng.choice((2, 3))
        every = 3
        ckdir, tldir = workdir / "ckpt", workdir / "timeline"
        ckdir.mkdir()
        tldir.mkdir()
        args = [program("faults_train.py"), "--ckpt-dir", str(ckdir), "--steps", "100000",
                "--ckpt-every", str(every), "--step-sleep", "0.02"]
        env = job_env({"HVDCORE_TIMELINE": str(tldir) + "/"}, launcher)
        job = Job(launch_command(launcher, np_, args), env)
        problems: list[str] = []
        want = rng.randrange(1, 4)
        job.wait_for(r"^CKPT ", count=want, timeout=90)
        time.sleep(rng.uniform(0.0, 0.2))
        sent = job.signal(signum) if job.proc.poll() is None else None
        if sent is not None and launcher == "srun" and signum == signal.SIGINT:
            # srun reports status on one Ctrl-C; a second within 1 s aborts (Slurm's design)
            time.sleep(0.3)
            job.signal(signum)
        if sent is None:
            problems.append("the job ended before the signal was sent")
        rc, _, left = _finish(job, problems, None)
        exit_s = None if sent is None or job.end is None else job.end - sent
        if exit_s is not None and exit_s > EXIT_BOUND_S:
            problems.append(f"job took {exit_s:.1f} s to stop after {signal.Signals(signum).name}")
        if rc == 0:
            problems.append("launcher exited 0 after being interrupted")
        if job.matches(r"^DONE "):
            problems.append("a rank finished instead of stopping")
        for r in range(np_):
            path = tldir / f"timeline-rank{r}.json"
            try:
                events = json.loads(path.read_text())
                if not isinstance(events, list) or not events:
                    problems.append(f"{path.name}: not a non-empty JSON array")
            except (OSError, ValueError) as exc:
                problems.append(f"{path.name} does not parse as JSON: {exc}")
        logged = {int(m.group(1)): m.group(2) for _, m in job.matches(r"^CKPT (\d+) (\w+)$")}
        found = ckpt.latest(ckdir)
        if found is None:
            problems.append("no complete checkpoint loads")
        else:
            path, step, arrays = found
            digest = ckpt.state_digest(arrays)
            if step in logged and logged[step] != digest:
                problems.append(f"{path.name}: state differs from what was saved")
            if step not in logged and step - every not in logged:
                problems.append(f"newest checkpoint step {step} unexpected (logged {logged})")
            if logged and step < max(logged):
                problems.append(f"newest loadable checkpoint is {step}, but "
                                f"{max(logged)} was completed")
        return _trial(problems, exit_s, left, job,
                      f"np={np_} after {want} checkpoint(s)")
    return run


# -- 6: checkpoint killed mid-write ----------------------------------------------------------

def checkpoint_killed(launcher: str, rng: random.Random, workdir: Path,
                      framework: str = "numpy") -> Trial:
    """Rank 0 is SIGKILLed half way through writing a checkpoint: the previous checkpoint is
    intact (verifies and equals what was saved), and ``--resume`` restores that exact state
    on every rank and finishes with the same parameters as an uninterrupted run (computed in
    one process)."""
    np_ = 2
    steps, every = 20, 4
    fault_step = rng.choice((8, 12, 16))
    base = [_train(framework), "--ckpt-dir", str(workdir), "--steps", str(steps),
            "--ckpt-every", str(every)]
    job = Job(launch_command(launcher, np_, [*base, "--fault", "kill-checkpoint",
                                             "--fault-rank", "0", "--fault-step",
                                             str(fault_step)]), job_env(launcher=launcher))
    problems: list[str] = []
    rc, _, left = _finish(job, problems, None)
    hits = job.matches(r"^FAULT 0 kill-checkpoint (\d+) ([\d.]+)$")
    fault_t = float(hits[0][1].group(2)) if hits else None
    exit_s = None if fault_t is None or job.end is None else job.end - fault_t
    if not hits:
        problems.append("the checkpoint write was not interrupted (no FAULT line)")
    if rc == 0:
        problems.append("launcher exited 0 after rank 0 was killed")
    if exit_s is not None and exit_s > EXIT_BOUND_S:
        problems.append(f"job took {exit_s:.1f} s to end")
    if not list(workdir.glob(".ckpt-*.tmp")):
        problems.append("no partial temp file: the kill did not land mid-write")
    if ckpt.path_for(workdir, fault_step).exists():
        problems.append(f"checkpoint {fault_step} exists although its write was killed")
    logged = {int(m.group(1)): m.group(2) for _, m in job.matches(r"^CKPT (\d+) (\w+)$")}
    prev = fault_step - every
    found = ckpt.latest(workdir)
    if found is None or found[1] != prev:
        problems.append(f"newest loadable checkpoint is {found and found[1]}, want {prev}")
    elif ckpt.state_digest(found[2]) != logged.get(prev):
        problems.append(f"checkpoint {prev} differs from the state that was saved")
    resume = Job(launch_command(launcher, np_, [*base, "--resume"]), job_env(launcher=launcher))
    rc2, _, left2 = _finish(resume, problems, None)
    if rc2 != 0:
        problems.append(f"resume run exited {rc2}:\n{resume.tail()}")
    resumed = {int(m.group(1)): (int(m.group(2)), m.group(3))
               for _, m in resume.matches(r"^RESUMED (\d+) (\d+) (\w+)$")}
    if set(resumed) != set(range(np_)):
        problems.append(f"RESUMED printed by ranks {sorted(resumed)}")
    for r, (step, digest) in resumed.items():
        if step != prev or digest != logged.get(prev):
            problems.append(f"rank {r} resumed step {step} digest {digest[:12]}, want {prev} "
                            f"{(logged.get(prev) or '?')[:12]}")
    want = _reference_digest(framework, steps, np_)
    done = {int(m.group(1)): m.group(2) for _, m in resume.matches(r"^DONE (\d+) (\w+)$")}
    if set(done) != set(range(np_)) or set(done.values()) != {want}:
        problems.append(f"final state after resume {done} != one-process reference {want[:12]}")
    return _trial(problems, exit_s, left + left2, job,
                  f"{framework} killed writing step {fault_step}")


_REFERENCES: dict[tuple[str, int, int], str] = {}


def _reference_digest(framework: str, steps: int, size: int) -> str:
    """Digest of the one-process reference training (cached: torch's takes seconds)."""
    key = (framework, steps, size)
    if key not in _REFERENCES:
        if framework == "torch":
            import faults_train_torch

            state = faults_train_torch.reference_state(steps, size)
        else:
            state = faults_train.reference_state(steps, size)
        _REFERENCES[key] = ckpt.state_digest(state)
    return _REFERENCES[key]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("1-kill", "SIGKILL one rank mid-training", ("mpirun", "hvdcorerun", "srun"),
             kill_one_rank),
    Scenario("2-exception", "exception in user code", ("mpirun", "hvdcorerun", "srun"),
             user_exception),
    Scenario("3-mismatch", "mismatch: name/shape/dtype/op/root/process set",
             ("mpirun", "hvdcorerun", "srun"), mismatches),
    Scenario("4-stall", "stall: warn at check time, end at bound",
             ("mpirun", "hvdcorerun", "srun"), stall),
    Scenario("5-sigint", "SIGINT to the launcher", ("mpirun", "hvdcorerun", "srun"),
             _signal_launcher(signal.SIGINT)),
    Scenario("5-sigterm", "SIGTERM to the launcher", ("mpirun", "hvdcorerun", "srun"),
             _signal_launcher(signal.SIGTERM)),
    Scenario("6-ckpt-kill", "checkpoint killed mid-write + resume",
             ("mpirun", "hvdcorerun", "srun"), checkpoint_killed),
    Scenario("1-kill-watchdog", "SIGKILL one rank, launcher keeps the job: hvdcore ends it",
             ("mpirun", "srun"), partial(kill_one_rank, launcher_ends_job=False)),
    Scenario("1-kill-torch", "SIGKILL one rank, torch DistributedOptimizer",
             ("mpirun", "hvdcorerun", "srun"), partial(kill_one_rank, framework="torch"),
             needs_torch=True),
    Scenario("2-exception-torch", "exception in user code, torch",
             ("mpirun", "hvdcorerun", "srun"), partial(user_exception, framework="torch"),
             needs_torch=True),
    Scenario("6-ckpt-kill-torch", "checkpoint killed mid-write + resume, torch",
             ("mpirun", "hvdcorerun", "srun"), partial(checkpoint_killed, framework="torch"),
             needs_torch=True),
)


# -- 8: Slurm (needs the localhost cluster with 2 nodes; launcher srun) -----------------------

def _squeue_has(job_id: str) -> bool:
    import subprocess

    res = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i %T"], capture_output=True,
                         text=True, timeout=30)
    return res.returncode == 0 and bool(res.stdout.strip())


def _slurm_job_gone(job_id: str, problems: list[str], bound: float = EXIT_BOUND_S) -> None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if not _squeue_has(job_id):
            return
        time.sleep(0.5)
    problems.append(f"Slurm job {job_id} still in squeue {bound:.0f} s after the job failed")


def _slurm_start(rng: random.Random, workdir: Path, launcher_ends_job: bool = True
                 ) -> tuple[Job, int, dict[int, str], str]:
    np_ = rng.choice((2, 4))
    args = [program("faults_train.py"), "--ckpt-dir", str(workdir), "--steps", "100000",
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
        return _trial(problems, None, 0, job, "setup")
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
    if not any(_names_rank("srun", job.output, r) for r in victims):
        problems.append(f"srun's output names none of the killed tasks {victims}")
    if not launcher_ends_job and not any(_hvdcore_names_dead(job.output, r) for r in victims):
        problems.append(f"no hvdcore watchdog line names a killed rank {victims}")
    _slurm_job_gone(job_id, problems)
    return _trial(problems, exit_s, left, job, f"np={np_} killed node {victim_node} "
                                                f"ranks {victims}"
                  + ("" if launcher_ends_job else " (no --kill-on-bad-exit)"))


def _srun_ended(job: Job, problems: list[str], fault_t: float,
                what: str) -> tuple[float | None, int]:
    """Wait for srun after a fault; it must fail, within the bound. Returns (time to exit,
    leftover processes)."""
    rc, _, left = _finish(job, problems, None)
    exit_s = None if job.end is None else job.end - fault_t
    if rc == 0:
        problems.append(f"srun exited 0 {what}")
    if exit_s is not None and exit_s > EXIT_BOUND_S:
        problems.append(f"job took {exit_s:.1f} s to end {what}")
    return exit_s, left


def slurm_scancel(launcher: str, rng: random.Random, workdir: Path) -> Trial:
    """``scancel`` of a running 2-node job: srun ends non-zero, every rank exits, the job
    leaves the queue, nothing is left running."""
    import subprocess

    job, np_, nodes, job_id = _slurm_start(rng, workdir)
    problems: list[str] = []
    if not job_id:
        problems.append(f"no job id from the ranks: {nodes}")
        job.kill_all()
        return _trial(problems, None, 0, job, "setup")
    job.wait_for(r"^CKPT ", timeout=60)
    fault_t = time.time()
    res = subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        problems.append(f"scancel {job_id} failed: {res.stderr.strip()}")
    exit_s, left = _srun_ended(job, problems, fault_t, "after scancel")
    _slurm_job_gone(job_id, problems)
    return _trial(problems, exit_s, left, job, f"np={np_} job {job_id}")


SCENARIOS = (*SCENARIOS,
             Scenario("8-slurm-node-kill", "Slurm: one node's ranks SIGKILLed", ("srun",),
                      slurm_node_killed),
             Scenario("8-slurm-node-kill-watchdog",
                      "Slurm: one node's ranks SIGKILLed, srun without --kill-on-bad-exit",
                      ("srun",), partial(slurm_node_killed, launcher_ends_job=False)),
             Scenario("8-scancel", "Slurm: scancel of a running job", ("srun",), slurm_scancel))
