"""Run the launcher child: forward signals, pass its exit code on, name the rank that failed.

The child (``mpirun``/``srun``) runs in its own session (process group) so that a terminal's Ctrl-C
reaches it once, through ``hvdcorerun``: SIGINT, SIGTERM and SIGHUP received by ``hvdcorerun``
are forwarded to it, and mpirun/srun stop the ranks. A third signal kills the child outright.
Its stdout is passed through untouched; its stderr is copied through as it arrives and scanned
for the launcher's own failure report, so that a failed job ends with one summary line such as
``hvdcorerun: rank 1 exited with exit code 3 (mpirun exit code 3)``.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from types import FrameType

__all__ = ["run_job", "failure_summary", "exit_code"]

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_TAIL_BYTES = 256 * 1024

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Open MPI
    (re.compile(r"MPI_ABORT was invoked on rank (?P<rank>\d+) in communicator (?P<comm>\S+)"
                r"\s+with errorcode (?P<code>\d+)"),
     "rank {rank} called MPI_Abort with error code {code}"),
    (re.compile(r"process rank (?P<rank>\d+) with PID (?P<pid>\d+) on node (?P<node>\S+) "
                r"exited on signal (?P<sig>\d+) \((?P<name>[^)]*)\)"),
     "rank {rank} (node {node}) was killed by signal {sig} ({name})"),
    (re.compile(r"Process name: \[\[\d+,\d+\],(?P<rank>\d+)\]\s+Exit code:\s+(?P<code>\d+)"),
     "rank {rank} exited with exit code {code}"),
    # hvdcore's own abort messages (ABORT_ON_EXCEPTION hook, engine failure): mpirun sometimes
    # loses its MPI_ABORT report, these lines come from the rank itself
    (re.compile(r"uncaught (?P<exc>\w+) on rank (?P<rank>\d+) of \d+; aborting"),
     "rank {rank} raised {exc}"),
    (re.compile(r"rank (?P<rank>\d+): aborting the MPI job after a fatal hvdcore error"),
     "rank {rank} aborted after a fatal hvdcore error"),
    # MPICH / Intel MPI (Hydra)
    (re.compile(r"RANK (?P<rank>\d+) PID (?P<pid>\d+) RUNNING AT (?P<node>\S+)\s*\n"
                r"=\s+(?P<what>KILLED BY SIGNAL: \d+(?: \([^)]*\))?|EXIT STATUS: \d+)"),
     "rank {rank} (node {node}): {what}"),
    # Slurm
    (re.compile(r"srun: error: (?P<node>\S+): tasks? (?P<rank>[\d,\-]+): (?P<what>[^\n]+)"),
     "rank {rank} (node {node}): {what}"),
)


def failure_summary(stderr_text: str) -> list[str]:
    """The failing ranks named in a launcher's stderr, one phrase each, first report first."""
    found: list[tuple[int, str]] = []
    for pattern, template in _PATTERNS:
        for match in pattern.finditer(stderr_text):
            found.append((match.start(), template.format(**match.groupdict())))
    found.sort()
    return list(dict.fromkeys(text for _, text in found))


def exit_code(returncode: int) -> int:
    """A shell-style exit code: a child killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _write_err(data: bytes) -> None:
    if sys.stderr is None:  # started with stderr closed
        return
    buffer = getattr(sys.stderr, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:  # a text-only stderr (e.g. under a test harness)
        sys.stderr.write(data.decode(errors="replace"))
        sys.stderr.flush()


def _say(line: str) -> None:
    """One line on stderr (nothing when stderr is closed: never on stdout)."""
    try:
        _write_err((line + "\n").encode())
    except (OSError, ValueError, AttributeError):
        pass


def _pump(stream: object, tail: bytearray) -> None:
    """Copy the child's stderr to ours; keep draining if ours is gone (else the child blocks)."""
    read = getattr(stream, "read1", None) or stream.read  # type: ignore[attr-defined]
    writable = True
    while True:
        chunk = read(65536)
        if not chunk:
            return
        if writable:
            try:
                _write_err(chunk)
            except (OSError, ValueError, AttributeError):  # stderr gone: drain silently
                writable = False
        tail.extend(chunk)
        if len(tail) > _TAIL_BYTES:
            del tail[: len(tail) - _TAIL_BYTES]


def run_job(cmd: Sequence[str], env: Mapping[str, str], name: str = "mpirun") -> int:
    """Run ``cmd`` to completion and return the exit code to pass on (see module docstring)."""
    try:
        proc = subprocess.Popen(list(cmd), env=dict(env), stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        _say(f"hvdcorerun: cannot start {cmd[0]}: {exc}")
        return 127
    received: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        try:
            if len(received) >= 3:
                proc.kill()
            else:
                proc.send_signal(signum)
        except ProcessLookupError:
            pass

    in_main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, forward) for s in _FORWARDED} if in_main else {}
    tail = bytearray()
    pump = threading.Thread(target=_pump, args=(proc.stderr, tail), daemon=True)
    pump.start()
    try:
        returncode = proc.wait()
        pump.join(timeout=10)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    code = exit_code(returncode)
    if received:
        names = ", ".join(signal.Signals(s).name for s in dict.fromkeys(received))
        _say(f"hvdcorerun: forwarded {names} to {name} (pid {proc.pid}); job exit code {code}")
    elif code != 0:
        culprits = failure_summary(tail.decode(errors="replace"))
        what = "; ".join(culprits) if culprits else f"{name} named no failing rank"
        _say(f"hvdcorerun: job failed: {what} ({name} exit code {code})")
    return code
