"""glibc's malloc thresholds for ranks of every launcher (issue: Open MPI's per-call scratch
buffer of a large allreduce, page-faulted in afresh under glibc's defaults).

Real 64 MiB allreduces at 2 and 3 ranks after ``hvd.init()`` (``tests/programs/malloc_faults.py``:
``hvd.allreduce_`` and raw mpi4py, results checked), and the minor page faults per raw call on
the main thread counted: a count, the same on every run of this stack (no timing; the engine
thread's calls are not counted, see the program). Under a plain ``mpirun`` hvdcore sets the thresholds itself at
``hvd.init()``; with ``GLIBC_TUNABLES`` in the environment, even empty, it leaves glibc alone;
under ``hvdcorerun`` the ranks get ``GLIBC_TUNABLES`` from the launcher.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT, mpi_env, untag

from hvdcore.malloc_tuning import MMAP_THRESHOLD, TRIM_THRESHOLD, tune_malloc
from hvdcore.runner.allocator_env import GLIBC_DEFAULT

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]

PROGRAM = str(ROOT / "tests" / "programs" / "malloc_faults.py")
FAULTS = re.compile(r"^main-thread faults per call: (\d+)$", re.M)


def _faults(cmd: list[str], glibc: str | None) -> int:
    env = mpi_env()
    env.pop("GLIBC_TUNABLES", None)
    if glibc is not None:
        env["GLIBC_TUNABLES"] = glibc
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=180)
    text = untag(proc.stdout + proc.stderr)
    assert proc.returncode == 0, text[-4000:]
    assert "result ok: True" in text, text[-4000:]
    m = FAULTS.search(untag(proc.stdout))
    assert m is not None, text[-4000:]
    return int(m.group(1))


@pytest.mark.parametrize("np_", [2, 3])
def test_plain_mpirun_ranks_get_the_thresholds(np_: int) -> None:
    """hvdcore's mallopt at init removes the scratch buffer's faults; an empty
    GLIBC_TUNABLES (the user's choice) keeps glibc's defaults and the faults with them."""
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", sys.executable, PROGRAM]
    left_alone = _faults(cmd, "")
    tuned = _faults(cmd, None)
    assert left_alone >= 1000, left_alone  # megabytes of scratch per call, 4 KiB a fault
    assert tuned * 4 < left_alone, (tuned, left_alone)


def test_hvdcorerun_ranks_get_glibc_tunables() -> None:
    cmd = [sys.executable, "-m", "hvdcore.runner", "-np", "2", sys.executable, PROGRAM]
    assert _faults(cmd, None) < 100


def test_tune_malloc_respects_glibc_tunables() -> None:
    assert tune_malloc({"GLIBC_TUNABLES": ""}) == "glibc malloc: left as GLIBC_TUNABLES sets it"
    # (in this pytest process: the thresholds are harmless, and glibc is this machine's libc)
    assert tune_malloc({}).startswith("glibc malloc: mmap threshold 128 MiB, trim threshold 256")


def test_launcher_and_init_set_the_same_thresholds() -> None:
    """hvdcorerun's GLIBC_TUNABLES and hvd.init()'s mallopt give ranks the same two numbers
    (written twice: the launcher imports no runtime module)."""
    settings = dict(item.split("=") for item in GLIBC_DEFAULT.split(":"))
    assert int(settings["glibc.malloc.mmap_threshold"]) == MMAP_THRESHOLD
    assert int(settings["glibc.malloc.trim_threshold"]) == TRIM_THRESHOLD
