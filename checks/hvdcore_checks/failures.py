"""Why a job failed, in one line, from its output: for sanity messages of the hvdcore checks.

A check that only says "the launcher exited 1" sends the user digging through the job's stderr.
:func:`failure_reason` picks the lines that say what happened: hvdcore's own messages (a dead
rank seen by the liveness watchdog, an uncaught exception, a stall), the launcher's verdict on
tasks (``srun: error: n2: tasks 2-3: Killed``, Open MPI's ``process rank 1 with PID ...``) and
Slurm's cancellation notices (``*** JOB 7 ON n1 CANCELLED AT ... ***``, also ``DUE TO TIME
LIMIT``).
"""

from __future__ import annotations

import re

__all__ = ["failure_lines", "failure_reason"]

_PATTERNS = [
    # hvdcore: the liveness watchdog (hvdcore/liveness.py), uncaught exceptions, stalls
    r"\[hvdcore rank \d+\] ERROR (rank \d+ \(pid \d+ on \S+\) is gone: [^;]*)",
    r"\[hvdcore rank \d+\] (uncaught \w+ on rank \d+ of \d+)",
    r"(StallError: .{0,160})",
    # Slurm
    r"(\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO [A-Z ]+?)? \*\*\*)",
    r"(srun: error: \S+: tasks? [\d,\-]+: .+)",
    r"(srun: error: .*(?:cancel|Cancel|CANCEL|time limit|TIME LIMIT).*)",
    # Open MPI's mpirun
    r"(mpirun noticed that process rank \d+ with PID \d+ on node \S+ exited on signal \d+.*)",
    r"(MPI_ABORT was invoked on rank \d+ in communicator \S+)",
]


def failure_lines(text: str, limit: int = 6) -> list[str]:
    """The distinct lines of ``text`` that explain a failure, in the order they appear."""
    found: list[tuple[int, str]] = []
    for pattern in _PATTERNS:
        for m in re.finditer(pattern, text):
            found.append((m.start(), m.group(1).strip()))
    out: list[str] = []
    for _, line in sorted(found):
        if line not in out:
            out.append(line)
    return out[:limit]


def failure_reason(*texts: str) -> str:
    """One line joining :func:`failure_lines` of all ``texts`` (stdout, stderr), or a hint."""
    lines: list[str] = []
    for text in texts:
        lines += [ln for ln in failure_lines(text) if ln not in lines]
    if not lines:
        return "no failure message in the job's output; see its stdout and stderr"
    return "; ".join(lines)
