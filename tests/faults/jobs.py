"""Run real jobs with injected faults and watch how they end (used by the scenarios and tests).

A :class:`Job` starts a launcher (``mpirun``, ``hvdcorerun`` = ``python -m hvdcore.runner``, or
``srun``) in a new session, timestamps every output line as it arrives, and after the launcher
exits checks the process table for anything left behind: any live process of the launcher's
session, and every rank PID the program reported (``READY <rank> <pid>``). Zombies
(``<defunct>``) are ignored: PID 1 on these machines does not reap.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.mpi_init_race import FAULT_HANDLER_ENV

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
LAUNCHERS = ("mpirun", "hvdcorerun", "srun")

__all__ = ["ROOT", "TESTS", "LAUNCHERS", "Job", "Trial", "job_env", "launch_command",
           "live_processes", "program"]


def program(name: str) -> list[str]:
    """The Python arguments that run the fault program ``name`` (a module of
    :mod:`faults.programs`), e.g. ``["-m", "faults.programs.train"]``."""
    return ["-m", f"faults.programs.{name}"]


def job_env(extra: dict[str, str] | None = None, launcher: str = "mpirun") -> dict[str, str]:
    """Environment for a job: root allowed, oversubscription, imports as in the tests.

    The one place that gives the ranks their import path: ``PYTHONPATH`` starts with this
    checkout (its ``hvdcore``, installed or not) and ``tests/`` (the :mod:`faults.programs`
    the ranks run with ``python -m``).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        OMPI_MCA_btl_vader_single_copy_mechanism="none",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")]),
    )
    if launcher == "srun":
        # both fake nodes of the localhost cluster share one hostname: no shared memory, and
        # TCP on loopback only (harness.slurm_fixtures.FAKE_NODES_ENV): another test's network
        # namespace (test_ssh_hosts, 192.0.2.x) made a rank connect() there and segfault (s73)
        env["OMPI_MCA_btl"] = "self,tcp"
        env["OMPI_MCA_btl_tcp_if_include"] = "lo"
        env.update(FAULT_HANDLER_ENV)  # a segfaulting rank's Python stack: mpi_init_crashed
    if extra:
        env.update(extra)
    return env


def launch_command(launcher: str, np: int, args: list[str], nodes: int | None = None,
                   launcher_ends_job: bool = True) -> list[str]:
    """The command line that starts ``python <args>`` on ``np`` ranks with ``launcher``.

    ``nodes`` (srun only): default: spread over both nodes of the localhost cluster.
    ``launcher_ends_job=False``: the launcher keeps the other ranks running when one dies
    (``mpirun --enable-recovery``; ``srun`` without ``--kill-on-bad-exit``, Slurm's default),
    so only hvdcore itself can end the job.
    """
    if launcher == "mpirun":
        mpirun = shutil.which("mpirun")
        if mpirun is None:
            raise RuntimeError("mpirun not found: install openmpi-bin (scripts/setup.sh does)")
        return [mpirun, "-np", str(np), "--oversubscribe",
                *([] if launcher_ends_job else ["--enable-recovery"]), sys.executable, *args]
    if launcher == "hvdcorerun":
        return [sys.executable, "-m", "hvdcore.runner", "-np", str(np), "--launcher", "mpirun",
                "--", sys.executable, *args]
    if launcher == "srun":
        srun = shutil.which("srun")
        if srun is None:
            raise RuntimeError("srun not found: install slurm-wlm")
        nodes = nodes if nodes is not None else min(np, 2)
        return [srun, f"--nodes={nodes}", f"--ntasks={np}", "--mpi=pmix",
                *(["--kill-on-bad-exit=1"] if launcher_ends_job else []),
                "--overcommit", sys.executable, *args]
    raise ValueError(f"unknown launcher {launcher!r}; choose from {', '.join(LAUNCHERS)}")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, session id) of a process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return fields[0], int(fields[3])


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def live_processes(pids: set[int], session: int | None) -> dict[int, str]:
    """Live (non-zombie) processes among ``pids`` or in ``session``: {pid: command line}."""
    found: dict[int, str] = {}
    candidates = set(pids)
    if session is not None:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                candidates.add(int(entry))
    for pid in candidates:
        st = _stat(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        if pid in pids or st[1] == session:
            found[pid] = _cmdline(pid)
    return found


@dataclass
class Trial:
    """Outcome of one trial: clean or not, time to exit, leftovers and what went wrong."""

    clean: bool
    exit_s: float | None
    leftovers: int = 0
    problems: list[str] = field(default_factory=list)
    note: str = ""
    #: a rank died of SIGSEGV inside MPI_Init, before hvdcore ran (harness.mpi_init_race)
    mpi_init_crash: bool = False

    def describe(self) -> str:
        """One paragraph for failure reports."""
        t = "-" if self.exit_s is None else f"{self.exit_s:.1f}s"
        return (f"clean={self.clean} exit={t} leftovers={self.leftovers} {self.note}\n  "
                + "\n  ".join(self.problems))


_READY = re.compile(r"^READY (\d+) (\d+)$")
# hvdcorerun's rank tag under mpirun (Open MPI --tag-output, as horovodrun): the lines are
# judged as the ranks printed them
_RANK_TAG = re.compile(r"^\[1,\d+\]<(?:stdout|stderr)>:")


class Job:
    """A launcher process in its own session with timestamped, streamed output."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> None:
        self.cmd = cmd
        self.lines: list[tuple[float, str, str]] = []  # (epoch, "out"/"err", text)
        self._cv = threading.Condition()
        self.start = time.time()
        self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self.session = self.proc.pid
        self.end: float | None = None
        self.returncode: int | None = None
        self.hung = False
        self._readers = [threading.Thread(target=self._read, args=(s, n), daemon=True)
                         for s, n in ((self.proc.stdout, "out"), (self.proc.stderr, "err"))]
        for t in self._readers:
            t.start()

    def _read(self, stream: object, name: str) -> None:
        for raw in iter(stream.readline, b""):  # type: ignore[attr-defined]
            with self._cv:
                text = _RANK_TAG.sub("", raw.decode(errors="replace").rstrip("\n"))
                self.lines.append((time.time(), name, text))
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 60.0) -> list[re.Match]:
        """Wait until ``count`` output lines match ``pattern`` (or timeout / job end)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                hits = [m for _, _, ln in self.lines if (m := rx.search(ln))]
                if len(hits) >= count or self.proc.poll() is not None:
                    return hits
                left = deadline - time.monotonic()
                if left <= 0:
                    return hits
                self._cv.wait(min(left, 0.2))

    def matches(self, pattern: str, stream: str | None = None) -> list[tuple[float, re.Match]]:
        """(arrival time, match) of every line matching ``pattern`` so far."""
        rx = re.compile(pattern)
        with self._cv:
            return [(t, m) for t, s, ln in self.lines
                    if (stream is None or s == stream) and (m := rx.search(ln))]

    @property
    def output(self) -> str:
        """Everything printed so far (stdout and stderr interleaved by arrival)."""
        with self._cv:
            return "\n".join(ln for _, _, ln in self.lines)

    @property
    def stderr(self) -> str:
        """Everything the job printed on stderr."""
        with self._cv:
            return "\n".join(ln for _, s, ln in self.lines if s == "err")

    def rank_pids(self) -> dict[int, int]:
        """{rank: pid} from the READY lines."""
        return {int(m.group(1)): int(m.group(2)) for _, m in self.matches(_READY.pattern)}

    def signal(self, signum: int) -> float:
        """Send ``signum`` to the launcher process only; returns the epoch it was sent."""
        t = time.time()
        self.proc.send_signal(signum)
        return t

    def wait(self, timeout: float) -> int | None:
        """Wait for the launcher; on timeout kill the whole session and mark the job hung."""
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.hung = True
            self.kill_all()
            self.proc.wait(10)
        self.end = time.time()
        for t in self._readers:
            t.join(5)
        return None if self.hung else self.returncode

    def leftovers(self, grace: float = 5.0) -> dict[int, str]:
        """Processes of this job still alive ``grace`` seconds after the launcher ended."""
        pids = set(self.rank_pids().values())
        deadline = time.monotonic() + grace
        while True:
            alive = live_processes(pids, self.session)
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.1)

    def kill_all(self) -> None:
        """SIGKILL every live process this job started (its session and its reported ranks)."""
        for pid in live_processes(set(self.rank_pids().values()), self.session):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def tail(self, n: int = 40) -> str:
        """The last ``n`` output lines (for failure reports)."""
        with self._cv:
            return "\n".join(f"[{s}] {ln}" for _, s, ln in self.lines[-n:])
