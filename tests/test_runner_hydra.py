"""hvdcorerun under a real MPICH Hydra ``mpirun`` (MPICH 5.0.2, the ``mpich`` wheel from PyPI:
:mod:`harness.mpich_wheel`).

Hydra's ``-l`` tags each write a rank makes, as Open MPI's ``--tag-output`` does: a print()
under ``PYTHONUNBUFFERED=1`` reaches the terminal as ``[1] loss[1]  [1] 1...``. hvdcorerun
gives each rank's line back whole, with one ``[R] `` tag. The ranks here are plain Python
processes (Hydra starts any program; the rank is ``PMI_RANK``): what is tested is the
launcher's command and its output, not MPI inside the ranks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import mpich_wheel

ROOT = Path(__file__).resolve().parents[1]

RANK_SAYS = """import os, sys
r = os.environ["PMI_RANK"]
print("loss", r, 0.5)
sys.stdout.write("part"); sys.stdout.flush(); sys.stdout.write(f"ial {r}\\n")
print("warn", r, file=sys.stderr)
sys.exit(int(os.environ.get("FAIL_RANK_1", "0")) if r == "1" else 0)
"""


@pytest.fixture(scope="module")
def hydra_bin() -> Path:
    """The folder of MPICH's ``mpirun`` (installed on first use)."""
    return mpich_wheel.install() / "bin"


def _hvdcorerun(cwd: Path, *args: str, env: dict[str, str] | None = None,
                unbuffered: bool = True) -> subprocess.CompletedProcess[str]:
    """A real ``python -m hvdcore.runner ARGS`` with MPICH's mpirun first on PATH;
    ``unbuffered``: PYTHONUNBUFFERED=1 (a print() is several writes), else unset (one)."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("HVDCORE_", "HOROVOD_")) and k != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, "-m", "hvdcore.runner", *args], cwd=cwd, capture_output=True,
        text=True, timeout=120,
        env={**mpich_wheel.environ(base, use_library=False), "PYTHONPATH": str(ROOT),
             **({"PYTHONUNBUFFERED": "1"} if unbuffered else {}), **(env or {})})


def test_each_rank_line_comes_back_whole_with_hydras_tag(hydra_bin: Path,
                                                          tmp_path: Path) -> None:
    (tmp_path / "says.py").write_text(RANK_SAYS)
    proc = _hvdcorerun(tmp_path, "--verbose", "-np", "2", sys.executable, "says.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{hydra_bin}/mpirun -l -n 2 " in proc.stderr, proc.stderr  # Hydra's flags
    assert sorted(proc.stdout.splitlines()) == [
        "[0] loss 0 0.5", "[0] partial 0", "[1] loss 1 0.5", "[1] partial 1"], proc.stdout
    assert sorted(ln for ln in proc.stderr.splitlines() if "warn" in ln) == [
        "[0] warn 0", "[1] warn 1"], proc.stderr


def test_no_tag_output_and_a_failing_rank(hydra_bin: Path, tmp_path: Path) -> None:
    # untagged, only what a rank writes at once stays whole: one print, block-buffered
    plain = "import os; print('loss', os.environ['PMI_RANK'], 0.5)"
    proc = _hvdcorerun(tmp_path, "--no-tag-output", "-np", "2", sys.executable,
                       "-c", plain, unbuffered=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["loss 0 0.5", "loss 1 0.5"], proc.stdout
    (tmp_path / "says.py").write_text(RANK_SAYS)
    proc = _hvdcorerun(tmp_path, "-np", "2", sys.executable, "says.py",
                       env={"FAIL_RANK_1": "3"})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "[1] partial 1" in proc.stdout.splitlines(), proc.stdout
    assert "hvdcorerun: job failed" in proc.stderr, proc.stderr
