"""Run a scenario program (``tests/programs/ray_job.py``, ...) once for a module's tests: in its
own session with a timeout (past it the whole group goes, the processes it started included),
its ``RESULT <name> <json>`` lines read back as one dict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def run_scenarios(program: Path, timeout: float, count: int) -> dict[str, Any]:
    """The program's results by scenario name, and its stderr under ``"stderr"``; the test
    fails when it times out, exits non-zero, or prints other than ``count`` results."""
    proc = subprocess.Popen([sys.executable, str(program)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"{program.name} did not finish in {timeout:g} s:\n{stdout[-3000:]}"
                    f"{stderr[-3000:]}")
    out: dict[str, Any] = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            _, name, payload = line.split(" ", 2)
            out[name] = json.loads(payload)
    assert proc.returncode == 0 and len(out) == count, stdout[-3000:] + stderr[-3000:]
    out["stderr"] = stderr
    return out
