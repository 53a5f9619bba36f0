"""benchmarks/malloc_tunables.py in its quick form under real mpirun: every row is measured and
the effect it exists to show is there. Open MPI's 32 MiB allreduce page-faults a scratch buffer
in on every call under glibc's defaults, and not under the settings hvdcorerun gives every rank
(a count of page faults, the same on every run of this stack: no timing is asserted)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT

from hvdcore.runner.allocator_env import GLIBC_DEFAULT

pytest.importorskip("torch")
pytest.importorskip("mpi4py")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]

ROW = re.compile(r"^(unset again|unset|hvdcorerun's) +(mpi4py|hvdcore) 32 MiB +([0-9.]+) +"
                 r"([0-9.]+)x +([0-9]+)$", re.M)


def test_quick_run_shows_the_scratch_buffer_faults() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "malloc_tunables.py"),
                           "--rounds", "1", "--sizes", "32", "--reps", "3", "--settings",
                           GLIBC_DEFAULT], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    rows = {(m[1], m[2]): int(m[5]) for m in ROW.finditer(proc.stdout)}
    assert set(rows) == {(s, p) for s in ("unset", "hvdcorerun's", "unset again")
                         for p in ("mpi4py", "hvdcore")}, proc.stdout
    for peer in ("mpi4py", "hvdcore"):
        # 16 MiB of scratch per call at 2 ranks: 4,097 faults of 4 KiB pages here
        assert rows[("unset", peer)] >= 1000 and rows[("unset again", peer)] >= 1000, proc.stdout
        assert rows[("hvdcorerun's", peer)] * 10 < rows[("unset", peer)], proc.stdout
