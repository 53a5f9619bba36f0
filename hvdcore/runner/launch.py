"""Run the launcher child: forward signals, pass its exit code on, name the rank that failed.

The child (``mpirun``/``srun``) runs in its own session (process group) so that a terminal's Ctrl-C
reaches it once, through ``hvdcorerun``: SIGINT, SIGTERM and SIGHUP received by ``hvdcorerun``
are forwarded to it, and mpirun/srun stop the ranks. A third signal kills the child outright.
Its stdout is passed through untouched; its stderr is copied through as it arrives and scanned
for the launcher's own failure report, so that a failed job ends with one summary line such as
``hvdcorerun: rank 1 exited with exit code 3 (mpirun exit code 3)``. Under Open MPI's
``--tag-output`` or Hydra's ``-l`` both streams go through
:class:`~hvdcore.runner.tagged_lines.LineJoiner` instead (whole lines, one tag each; a partial
line is let out after a pause of ``_PAUSE_S``).
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from hvdcore.runner.tagged_lines import LineJoiner, TagFormat

__all__ = ["run_job", "failure_summary", "exit_code"]

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_TAIL_BYTES = 256 * 1024
_PAUSE_S = 0.5  # a rank's unfinished line is shown after this long without more output

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


def _write_to(target: object, data: bytes) -> None:
    if target is None:  # started with this stream closed
        return
    buffer = getattr(target, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:  # a text-only stream (e.g. under a test harness)
        target.write(data.decode(errors="replace"))  # type: ignore[attr-defined]
        target.flush()  # type: ignore[attr-defined]


def _write_err(data: bytes) -> None:
    _write_to(sys.stderr, data)


def _write_out(data: bytes) -> None:
    _write_to(sys.stdout, data)


def _say(line: str) -> None:
    """One line on stderr (nothing when stderr is closed: never on stdout)."""
    try:
        _write_err((line + "\n").encode())
    except (OSError, ValueError, AttributeError):
        pass


def _pump(stream: object, tail: bytearray | None, write: Callable[[bytes], None] = _write_err,
          joiner: LineJoiner | None = None) -> None:
    """Copy one of the child's streams to ours (through ``joiner`` when given), keeping the
    last of it in ``tail``; keep draining if ours is gone (else the child blocks)."""
    fd = stream.fileno()  # type: ignore[attr-defined]
    writable = True
    ended = False
    while not ended:
        if joiner is not None and not select.select([fd], [], [], _PAUSE_S)[0]:
            data = joiner.flush()  # a pause: let out the unfinished lines
        else:
            chunk = os.read(fd, 65536)
            ended = not chunk
            data = chunk if joiner is None else (joiner.flush() if ended else joiner.feed(chunk))
        if not data:
            continue
        if writable:
            try:
                write(data)
            except (OSError, ValueError, AttributeError):  # ours is gone: drain silently
                writable = False
        if tail is not None:
            tail.extend(data)
            if len(tail) > _TAIL_BYTES:
                del tail[: len(tail) - _TAIL_BYTES]


def run_job(cmd: Sequence[str], env: Mapping[str, str], name: str = "mpirun",
            tagged: TagFormat | None = None) -> int:
    """Run ``cmd`` to completion and return the exit code to pass on (see module docstring);
    ``tagged``: the ranks' lines carry these tags (Open MPI ``--tag-output``, Hydra ``-l``),
    joined back into whole lines."""
    try:
        proc = subprocess.Popen(list(cmd), env=dict(env), stderr=subprocess.PIPE,
                                stdout=subprocess.PIPE if tagged else None,
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
    pumps = [threading.Thread(target=_pump, daemon=True, args=(
        proc.stderr, tail, _write_err, LineJoiner(tagged) if tagged else None))]
    if tagged:
        pumps.append(threading.Thread(target=_pump, daemon=True,
                                      args=(proc.stdout, None, _write_out, LineJoiner(tagged))))
    for pump in pumps:
        pump.start()
    try:
        returncode = proc.wait()
        for pump in pumps:
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
