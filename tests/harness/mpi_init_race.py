"""Open MPI 4.1's startup race on the 2-node localhost Slurm, told apart from every other crash.

About once in 300 ``srun --mpi=pmix`` job starts on 2 loaded cores (both fake nodes on one host),
a rank dies of SIGSEGV inside ``MPI_Init``. A core dump (s78) showed where: in the modex fence
wait, Open MPI 4.1.4's TCP BTL hands a peer's first message (ob1's MATCH, tag 0x41) to a receive
callback ob1 has not registered yet (NULL). hvdcore has not run a line of its own by then, so
the tests that start such jobs run the job once more when, and only when, the crash is this one:
Python's fault handler (:data:`FAULT_HANDLER_ENV`) shows the rank's innermost frame outside
importlib on a ``from mpi4py import MPI`` line.
"""

from __future__ import annotations

import linecache
import re
import subprocess
import sys
from collections.abc import Callable
from typing import TypeVar

__all__ = ["FAULT_HANDLER_ENV", "again_on_crash", "mpi_init_crashed", "run_job"]

T = TypeVar("T")

#: A segfaulting rank prints its Python stack; Open MPI's own handler, which would replace
#: Python's, prints only a libc frame (a NULL call leaves nothing to unwind).
FAULT_HANDLER_ENV = {"PYTHONFAULTHANDLER": "1", "OMPI_MCA_opal_signal": ""}

_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+) in ', re.M)


def _in_mpi_init(dump: str) -> bool:
    frames = [(p, int(n)) for p, n in _FRAME.findall(dump) if not p.startswith("<frozen ")]
    return bool(frames) and "from mpi4py import MPI" in linecache.getline(*frames[0])


def mpi_init_crashed(output: str) -> bool:
    """Whether ranks died of SIGSEGV, every one of them while importing ``mpi4py.MPI`` (inside
    ``MPI_Init``)."""
    dumps = output.split("Fatal Python error: Segmentation fault")[1:]
    return bool(dumps) and all(_in_mpi_init(d) for d in dumps)


def again_on_crash(run: Callable[[], T], failed_output: Callable[[T], str | None],
                   what: str) -> T:
    """``run()``, and once more when ``failed_output(result)`` (the output of a failed run;
    None when it passed) shows a rank dead in ``MPI_Init`` (:func:`mpi_init_crashed`)."""
    result = run()
    out = failed_output(result)
    if out is not None and mpi_init_crashed(out):
        print(f"a rank died in MPI_Init (Open MPI's startup race); running again: {what}\n"
              f"{out[-3000:]}", file=sys.stderr, flush=True)
        result = run()
    return result


def run_job(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run`` of a job (text, output captured), through :func:`again_on_crash`
    (``env`` holds :data:`FAULT_HANDLER_ENV`). Raises ``subprocess.TimeoutExpired`` like
    ``subprocess.run``."""
    return again_on_crash(
        lambda: subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout),
        lambda res: None if res.returncode == 0 else res.stdout + res.stderr, " ".join(cmd))
